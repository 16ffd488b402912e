"""The offline summarizer: deterministic rules that write a working memory from messages."""

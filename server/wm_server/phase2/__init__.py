"""Phase 2: the background worker that folds archives into the working memory."""

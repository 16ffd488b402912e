"""Search over what the service stores: the text analyzer shared by every engine and query."""

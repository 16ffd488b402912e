"""Who may call and over what: authentication, TLS, tenancy."""

"""txnlog.coordinator: the transaction coordinator process and the client that talks to it."""

"""Redis storage: versioned JSON documents (sessions, banks) with an append-only audit stream."""

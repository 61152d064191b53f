//! A private PostgreSQL cluster under a state directory, for the gateway's embedded default.

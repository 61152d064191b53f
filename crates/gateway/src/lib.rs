//! The gateway: authentication, gRPC translation, driver calls and reconciliation over the store.

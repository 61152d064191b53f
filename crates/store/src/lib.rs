//! The gateway's PostgreSQL store: migrations, SERIALIZABLE transactions and the SQL functions that own every invariant.

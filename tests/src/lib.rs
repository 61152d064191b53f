//! End-to-end harness: starts a real gateway over a fresh database and talks to it as users and sandboxes.

//! The supervisor: first process of every sandbox; runs its main command and reports to the gateway.

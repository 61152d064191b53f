//! create_env.rs on the container driver (podman through its Docker API): the variables
//! reach the supervisor through the container's attached stdin, never its configuration.

#[path = "create_env.rs"]
mod suite;

//! escape.rs on the container driver (podman through its Docker API): the same tests, each
//! sandbox a container of the test image (`is_container_suite` sees this target's name).

#[path = "escape.rs"]
mod suite;

//! Compute drivers: start, stop and list sandbox workloads (the process driver is the default).

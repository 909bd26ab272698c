//! USDT markers (`<sys/sdt.h>` probes): `notes` reads `.note.stapsdt`, `args` parses each site's
//! argument string, `spec` parses `-U`, `plan` resolves specs to call sites, `pairs` says which
//! probes pair into spans.
pub mod args;
#[cfg(test)]
mod fuzz;
pub mod notes;
pub mod pairs;
pub mod plan;
pub mod spec;

//! USDT markers (`<sys/sdt.h>` probes): `notes` reads `.note.stapsdt`, `args` parses each site's
//! argument string, `spec` parses `-U`, `plan` resolves specs to call sites and begin/end pairs.
pub mod args;
#[cfg(test)]
mod fuzz;
pub mod notes;
pub mod plan;
pub mod spec;

//! The `mpi` section's lines in the readable summary (the section itself is the MPI family's:
//! `pipeline::family::mpi`).
use crate::{model::duration::human, pipeline::family::mpi::MpiSummary};

impl MpiSummary {
    /// Lines for the readable summary: per MPI function, its calls, time and bytes.
    pub fn table(&self) -> String {
        let calls: u64 = self.functions.iter().map(|f| f.total.calls).sum();
        let mut out = format!("\nMPI: {calls} calls of {} functions\n", self.functions.len());
        let header = ["FUNCTION", "CLASS", "CALLS", "TIME", "BYTES"];
        let rows: Vec<Vec<String>> = self
            .functions
            .iter()
            .map(|f| {
                let t = &f.total;
                let bytes = match t.unsized_calls {
                    0 => t.bytes.to_string(),
                    n => format!("{} (+{n} calls of unknown size)", t.bytes),
                };
                vec![
                    f.name.to_string(),
                    t.class.to_string(),
                    t.calls.to_string(),
                    human(t.total_ns),
                    bytes,
                ]
            })
            .collect();
        out += &super::table::render(&header, &rows, 2);
        if self.without_args > 0 {
            out += &format!(
                "  {} calls without their arguments (entry records lost)\n",
                self.without_args
            );
        }
        out
    }
}

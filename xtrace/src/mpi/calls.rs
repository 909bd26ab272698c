//! MPI calls in the pipeline: each call's entry record (`ArgsEvent`) waits here for its span, which
//! is then rendered with what the call moved (`"count":1024,"datatype":"MPI_DOUBLE","bytes":8192`,
//! its peer, tag or root) and added up per function: calls, time, bytes. A datatype is named by
//! the object Open MPI's handle points at (found in the process's image of its MPI library), or
//! sized from MPICH's handle; a derived datatype (`MPI_Type_contiguous`) has no size here, so its
//! call counts without bytes.
use std::collections::BTreeMap;

use serde::Serialize;
use xtrace_common::event::ArgsEvent;

use crate::{
    image::Images,
    model::{
        mpi_api::{mpich_datatype_size, Src},
        pending::Pending,
    },
    probes::mpi_plan::{Datatype, MpiPlan},
};

/// A call's entry registers and stack slots, waiting for its span.
#[derive(Clone, Copy, Debug)]
struct Entry {
    regs: [u64; 6],
    stack: [u64; 4],
}

/// Per MPI function: what its calls added up to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Total {
    pub class: &'static str,
    pub calls: u64,
    pub total_ns: u64,
    /// Bytes of the calls whose datatype has a known size (the send side of calls that send and
    /// receive; for a reduction, one rank's buffer).
    pub bytes: u64,
    /// Calls with a count whose datatype has no known size (a derived datatype).
    pub unsized_calls: u64,
}

#[derive(Debug, Default)]
pub struct Calls {
    plan: MpiPlan,
    pending: Pending<Entry>,
    /// Per function name.
    pub totals: BTreeMap<&'static str, Total>,
    /// Calls whose entry record was lost (ring full, too many waiting): counted, without bytes.
    pub without_args: u64,
}

/// A C `int` argument from its register.
fn int(value: u64) -> i64 {
    i64::from(value as u32 as i32)
}

impl Calls {
    pub fn new(plan: MpiPlan) -> Self {
        Calls {
            plan,
            ..Default::default()
        }
    }

    /// Whether any MPI function is traced.
    pub fn traced(&self) -> bool {
        !self.plan.functions.is_empty()
    }

    /// Whether `probe` is an MPI function.
    pub fn owns(&self, probe: u32) -> bool {
        self.plan.functions.contains_key(&probe)
    }

    /// Entry records dropped because too many calls were waiting for their spans.
    pub fn dropped(&self) -> u64 {
        self.pending.dropped
    }

    /// A call's entry record.
    pub fn args(&mut self, event: &ArgsEvent) {
        if self.owns(event.probe_id) {
            let entry = Entry {
                regs: event.args,
                stack: event.stack,
            };
            self.pending
                .enter(event.header.tid, event.start_ns, event.depth, entry);
        }
    }

    /// The span of MPI probe `probe`, on thread `tid` of `pid`: counted, and its trace.json
    /// `args` members.
    pub fn span(
        &mut self,
        images: &mut Images,
        probe: u32,
        (pid, tid): (u32, u32),
        span: (u64, u64),
    ) -> String {
        let Some(function) = self.plan.functions.get(&probe).copied() else {
            return String::new();
        };
        let (start_ns, end_ns) = span;
        let total = self.totals.entry(function.name).or_insert_with(|| Total {
            class: function.class.name(),
            ..Total::default()
        });
        total.calls += 1;
        total.total_ns += end_ns.saturating_sub(start_ns);
        let Some(entry) = self.pending.take(tid, start_ns) else {
            self.without_args += 1;
            return String::new();
        };
        let get = |src: Src| match src {
            Src::Reg(i) => entry.regs[i],
            Src::Stack(j) => entry.stack[j],
        };
        let mut values = String::new();
        if let Some(count) = function.count.map(get) {
            let count = int(count).max(0).unsigned_abs();
            values += &format!(",\"count\":{count}");
            let datatype = function
                .datatype
                .map(get)
                .map(|handle| (handle, datatype(&self.plan, images, (pid, start_ns), handle)));
            let total = self.totals.get_mut(function.name).expect("added above");
            match datatype {
                Some((_, Some(datatype))) => {
                    let bytes = count.saturating_mul(datatype.size);
                    total.bytes += bytes;
                    values += &format!(",\"datatype\":\"{}\",\"bytes\":{bytes}", datatype.name);
                }
                Some((handle, None)) => {
                    total.unsized_calls += 1;
                    values += &format!(",\"datatype\":\"{handle:#x}\"");
                }
                None => {}
            }
        }
        for (key, src) in [
            ("peer", function.peer),
            ("tag", function.tag),
            ("root", function.root),
        ] {
            if let Some(value) = src.map(get) {
                values += &format!(",\"{key}\":{}", int(value));
            }
        }
        values
    }
}

/// The predefined datatype `handle` of a call made by `pid` at `ns`: MPICH's handles hold their
/// size; Open MPI's point at an object of its library (or the executable's copy of it, when the
/// executable's code names it: a copy relocation), whose address in that file is the handle less
/// the file's load bias (found from the process's mapping of its code).
fn datatype(plan: &MpiPlan, images: &mut Images, (pid, ns): (u32, u64), handle: u64) -> Option<Datatype> {
    if let Some(size) = mpich_datatype_size(handle) {
        return Some(Datatype {
            name: "MPICH predefined",
            size,
        });
    }
    let image = images.seen(pid, ns);
    let find = |images: &Images| {
        images.maps(image).iter().find_map(|mapping| {
            let types = plan
                .datatypes
                .get(crate::elf::symbolize::module_name(&mapping.path))?;
            let bias = types.exec.bias(mapping)?;
            types.by_address.get(&handle.checked_sub(bias)?).copied()
        })
    };
    find(images).or_else(|| {
        // Not known yet: the process's maps as they are now.
        images.read_proc(image);
        find(images)
    })
}

#[cfg(test)]
mod tests {
    use super::int;

    #[test]
    fn int_arguments_keep_their_sign() {
        // MPI_ANY_SOURCE and MPI_ANY_TAG are -1 in both Open MPI and MPICH; the upper half of the
        // register is whatever the caller left there.
        assert_eq!(int(0xdead_beef_ffff_ffff), -1);
        assert_eq!(int(7), 7);
    }
}

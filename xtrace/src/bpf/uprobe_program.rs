//! The kernel programs a probe plan attaches at user-space addresses, by role: where each goes
//! and what detaching it first or last means. Their names are the object's program names; the
//! rest of xtrace names them by role only.

/// One program of the object that runs on a uprobe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UprobeProgram {
    /// A traced function's entry: opens its call.
    SpanEnter,
    /// `SpanEnter` as a sleepable program, for probes that read a string argument (its reads may
    /// fault pages in), where the kernel takes sleepable uprobes.
    SpanEnterSleepable,
    /// A traced function's return, as a uretprobe: ends its call.
    SpanExit,
    /// A traced function's exit instructions, probed where a uretprobe cannot go: ends its call.
    SpanRet,
    /// `--stacks`: the caller of each traced call, after `SpanEnter` opened it.
    CallStack,
    /// A USDT site.
    UsdtHit,
    /// `--stacks`: the stack of each hit of an instant or begin USDT probe, before `UsdtHit`.
    UsdtStack,
    /// The tool library's `xtrace:gpu_records` USDT site: a batch of GPU device records.
    GpuRecords,
    /// The bench's floor (`examples/uprobe_floor.rs`): a program that does nothing, at an entry.
    Noop,
    /// The floor's `Noop` as a return probe.
    NoopRet,
    /// The floor's program that reads the clock once, at an entry.
    Clock,
    /// The floor's `Clock` as a return probe.
    ClockRet,
}

impl UprobeProgram {
    /// The program's name in the object.
    pub const fn name(self) -> &'static str {
        match self {
            UprobeProgram::SpanEnter => "span_enter",
            UprobeProgram::SpanEnterSleepable => "span_enter_s",
            UprobeProgram::SpanExit => "span_exit",
            UprobeProgram::SpanRet => "span_ret",
            UprobeProgram::CallStack => "call_stack",
            UprobeProgram::UsdtHit => "usdt_hit",
            UprobeProgram::UsdtStack => "usdt_stack",
            UprobeProgram::GpuRecords => "gpu_records",
            UprobeProgram::Noop => "noop",
            UprobeProgram::NoopRet => "noop_ret",
            UprobeProgram::Clock => "clock",
            UprobeProgram::ClockRet => "clock_ret",
        }
    }

    /// Whether it attaches to USDT sites (with their semaphores as reference counters).
    pub const fn is_usdt(self) -> bool {
        matches!(
            self,
            UprobeProgram::UsdtHit | UprobeProgram::UsdtStack | UprobeProgram::GpuRecords
        )
    }

    /// Whether it ends calls: detached after the programs that begin them.
    pub const fn ends_calls(self) -> bool {
        matches!(self, UprobeProgram::SpanExit | UprobeProgram::SpanRet)
    }

    /// Whether it attaches as a return probe (a uretprobe).
    pub const fn is_return_probe(self) -> bool {
        matches!(
            self,
            UprobeProgram::SpanExit | UprobeProgram::NoopRet | UprobeProgram::ClockRet
        )
    }
}

impl std::fmt::Display for UprobeProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::UprobeProgram::*;

    /// Every role names a program the embedded object has.
    #[test]
    fn every_role_is_a_program_of_the_object() {
        let object = aya_obj::Object::parse(crate::bpf::OBJECT).expect("the embedded object");
        let roles = [
            SpanEnter,
            SpanEnterSleepable,
            SpanExit,
            SpanRet,
            CallStack,
            UsdtHit,
            UsdtStack,
            GpuRecords,
            Noop,
            NoopRet,
            Clock,
            ClockRet,
        ];
        for role in roles {
            assert!(object.programs.contains_key(role.name()), "{role}");
        }
    }
}

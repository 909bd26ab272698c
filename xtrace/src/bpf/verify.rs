//! Verifying programs side by side. The kernel's verifier is most of the time from xtrace's start
//! to its first probe in a sampling capture that measures off-CPU time: the sampler and
//! `off_cpu_return` take about 70 ms each on 6.18, about a second each under software emulation,
//! one after the other. A privileged load takes no global lock in the verifier, so two loads on
//! two threads overlap (on two CPUs they still slow each other: about 115 ms each on 6.18).
//!
//! Only the load is moved: each program is still attached where it was, in the order the
//! capture needs, by code that loads it first when it is not loaded yet. A load that fails here,
//! or whose thread could not start, is left for that code to make again and report, as it would
//! have.
use aya::{
    programs::{Program, ProgramError},
    Ebpf,
};

/// Loads the programs `names` of the object at once, each on a thread of its own (the first on
/// this one). Only programs whose load takes no argument (perf-event and raw tracepoint ones)
/// are loaded here; a failure is logged and left for the attach.
pub fn load_together(ebpf: &mut Ebpf, names: &[&str]) {
    let mut programs: Vec<(&str, &mut Program)> = ebpf
        .programs_mut()
        .filter(|(name, program)| names.contains(name) && loads_bare(program))
        .collect();
    let Some((first, rest)) = programs.split_first_mut() else {
        return;
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = rest
            .iter_mut()
            .filter_map(|(name, program)| {
                let name = *name;
                std::thread::Builder::new()
                    .name("xtrace-verify".into())
                    .spawn_scoped(scope, move || report(name, load(program)))
                    .map_err(|e| log::debug!("no thread to verify {name} on: {e}"))
                    .ok()
            })
            .collect();
        report(first.0, load(first.1));
        for other in others {
            // A panic in aya's load is not this thread's to hide.
            if let Err(panic) = other.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

fn loads_bare(program: &Program) -> bool {
    matches!(program, Program::PerfEvent(_) | Program::RawTracePoint(_))
}

fn load(program: &mut Program) -> Result<(), ProgramError> {
    match program {
        Program::PerfEvent(p) => p.load(),
        Program::RawTracePoint(p) => p.load(),
        _ => Ok(()),
    }
}

fn report(name: &str, loaded: Result<(), ProgramError>) {
    match loaded {
        Ok(()) | Err(ProgramError::AlreadyLoaded) => {}
        Err(e) => log::debug!("verifying {name} beside the others: {e}; left for its attach"),
    }
}

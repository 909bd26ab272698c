//! What a plan of function probes leaves out or probes another way, and the warnings that say so:
//! per file, the functions a glob matched that are not traced, by reason (one line per reason
//! and file, in a fixed order), and how many traced functions have their exits probed at their
//! instructions or with return probes, and why.
use std::collections::BTreeMap;

use super::{exits::ExitMode, uprobe::Untraceable};

/// The first five of `names`, joined, with `, ...` when there are more.
fn first_names(names: &[String]) -> String {
    let more = if names.len() > 5 { ", ..." } else { "" };
    names[..names.len().min(5)].join(", ") + more
}

/// How a file's traced functions have their exits probed, for the plan's notices.
#[derive(Default)]
pub(super) struct AtExits {
    /// At their instructions, as `--exits auto` or `ret` asks.
    pub(super) probed: usize,
    /// With return probes, where `--exits` asked for their instructions.
    pub(super) not: usize,
    /// At their instructions, as they return twice (under every mode).
    pub(super) twice: usize,
    /// The file is Go code.
    pub(super) go: bool,
    /// With return probes, in a file with C cleanup tables ([`super::elf::ElfSymbols::c_cleanups`]).
    pub(super) cleanups: usize,
}

/// The functions globs matched that are not traced: per reason, per file shown, their names.
#[derive(Default)]
pub(super) struct LeftOut {
    /// Their entry the kernel's uprobes refuse or would not run.
    unprobeable: BTreeMap<String, Vec<String>>,
    /// Go code whose exits cannot be found.
    go_stack: BTreeMap<String, Vec<String>>,
    /// Entered without a return address.
    uncalled: BTreeMap<String, Vec<String>>,
    /// IFUNCs whose implementation is unknown.
    ifuncs: BTreeMap<String, Vec<String>>,
    /// Unwinding the stack from their own frame.
    unwinders: BTreeMap<String, Vec<String>>,
    /// Exits wanted at their instructions, and none can be probed.
    no_exit: BTreeMap<String, Vec<String>>,
    /// IFUNCs whose implementation is outside their file.
    outside: BTreeMap<String, Vec<String>>,
    /// IFUNCs whose resolver picks nothing.
    nothing: BTreeMap<String, Vec<String>>,
    /// Returning twice, with exits that cannot be found.
    twice: BTreeMap<String, Vec<String>>,
}

impl LeftOut {
    /// Notes that function `name` of file `file` is not traced, for reason `why`.
    pub(super) fn add(&mut self, why: &Untraceable, file: String, name: String) {
        let by_file = match why {
            Untraceable::Refused(_) => &mut self.unprobeable,
            Untraceable::ReturnsTwice => &mut self.twice,
            Untraceable::GoStack => &mut self.go_stack,
            Untraceable::Uncalled => &mut self.uncalled,
            Untraceable::Ifunc => &mut self.ifuncs,
            Untraceable::IfuncOutside => &mut self.outside,
            Untraceable::IfuncPicksNothing => &mut self.nothing,
            Untraceable::Unwinds => &mut self.unwinders,
            Untraceable::NoExit => &mut self.no_exit,
        };
        by_file.entry(file).or_default().push(name);
    }

    /// One warning per reason and file, appended to `out`.
    pub(super) fn notices(self, out: &mut Vec<String>) {
        for (file, names) in self.unprobeable {
            out.push(format!(
                "{file}: {} matched function(s) start with an instruction the kernel's uprobes refuse \
                 (a lock or segment-override prefix, a vector instruction whose opcode byte they \
                 refuse) or would not run (a vector instruction they take for a jump, a trap of the \
                 program's own) and are not traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.go_stack {
            out.push(format!(
                "{file}: {} matched Go function(s) have no exit instruction that can be probed, and a \
                 return probe would make the Go runtime abort the process, so they are not traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.uncalled {
            out.push(format!(
                "{file}: {} matched function(s) are entered without a return address (a program's \
                 entry point, a signal-return or lazy-binding trampoline), where a span's return probe \
                 would overwrite what the stack holds, so they are not traced: {}",
                names.len(),
                names.join(", ")
            ));
        }
        for (file, names) in self.ifuncs {
            out.push(format!(
                "{file}: {} matched function(s) are GNU indirect functions (IFUNCs) whose code is \
                 unknown (a library xtrace has not loaded itself, with no slot for them filled in a \
                 traced process), and they are not traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.unwinders {
            out.push(format!(
                "{file}: {} matched function(s) unwind the stack from their own frame (C++ throws, \
                 thread cancellation and pthread_exit, backtraces), which a return probe would cut \
                 short, and leave through no exit instruction that can be probed, so they are not \
                 traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.no_exit {
            out.push(format!(
                "{file}: {} matched function(s) have no exit instruction that can be probed (they \
                 leave through an indirect jump, or never return), where a return probe could abort \
                 the process when an exception unwinds through them, so they are not traced \
                 (--exits uretprobe traces them at that risk): {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.outside {
            out.push(format!(
                "{file}: {} matched function(s) are GNU indirect functions (IFUNCs) whose resolvers \
                 pick code outside the file (the kernel's vDSO), where uprobes cannot go, and they are \
                 not traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.nothing {
            out.push(format!(
                "{file}: {} matched function(s) are GNU indirect functions (IFUNCs) whose resolvers \
                 pick no code (a null address), so nothing calls them, and they are not traced: {}",
                names.len(),
                first_names(&names)
            ));
        }
        for (file, names) in self.twice {
            out.push(format!(
                "{file}: {} matched function(s) return twice, as setjmp does, and their exit \
                 instructions cannot be found to probe; a return probe would break their second \
                 return, so they are not traced: {}",
                names.len(),
                names.join(", ")
            ));
        }
    }
}

/// The warnings on how traced functions' exits are probed, per file (`at_exits`), under `exits`,
/// appended to `out`.
pub(super) fn exit_notices(at_exits: BTreeMap<String, AtExits>, exits: ExitMode, out: &mut Vec<String>) {
    for (file, counts) in at_exits {
        let AtExits {
            probed,
            not,
            twice: twice_probed,
            go,
            cleanups,
        } = counts;
        if cleanups > 0 {
            out.push(format!(
                "{file}: {cleanups} traced function(s) have return probes: a thread cancelled, or \
                 ending with pthread_exit, while one of them is on its stack skips the cleanup \
                 handlers and C++ destructors of the frames above it (the unwinder cannot pass a \
                 return probe); --exits ret probes their exit instructions instead (slower)"
            ));
        }
        if twice_probed > 0 {
            out.push(format!(
                "{file}: {twice_probed} traced function(s) return twice, as setjmp does: their \
                 exits are probed at their ret and tail-call instructions, as a return probe would \
                 break their second return"
            ));
        }
        if probed > 0 && exits == ExitMode::Auto && go {
            out.push(format!(
                "{file} is Go code: {probed} traced function(s) end at their own ret and tail-call \
                 instructions, as the Go runtime aborts a process whose goroutine stack holds a \
                 return probe's address (slower than return probes)"
            ));
        } else if probed > 0 && exits == ExitMode::Auto {
            out.push(format!(
                "{file} has exception tables: {probed} traced function(s) that call others end at \
                 their own ret and tail-call instructions, so an exception or panic unwinding through \
                 them cannot abort the process (slower than return probes; --exits uretprobe for those)"
            ));
        }
        if not > 0 {
            out.push(format!(
                "{file}: {not} traced function(s) have no size in the symbol table, start with \
                 their return, leave at an instruction uprobes refuse or may leave through code no \
                 symbol names or an indirect jump, so their returns are probed with return probes"
            ));
        }
    }
}

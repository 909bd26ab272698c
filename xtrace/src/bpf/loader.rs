//! aya's loader, made on a thread of its own while the probes are planned. aya 0.14's
//! `EbpfLoader::new` always parses the kernel's BTF (`/sys/kernel/btf/vmlinux`, several MB): tens
//! of milliseconds on a host, about half a second under software emulation, on the path from
//! xtrace's start to its first probe. xtrace's object has no CO-RE relocation for that BTF to serve
//! (a test below says so), so the loader goes without it, and the parse, and dropping what it
//! built, happen beside the planning instead of before the load, with aya's probes of the kernel's
//! features, which its first load would make. A second thread reads what else the capture waits
//! for: xtrace's own index of the kernel's BTF when the capture asks it questions
//! ([`KernelBtf::shared`]), and the BTF the off-CPU programs are typed by (parsed from the same
//! bytes).
use std::thread::JoinHandle;

use aya::{Btf, BtfError, EbpfLoader, Endianness};

use super::btf::KernelBtf;

/// What the threads make besides the loader.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wanted {
    /// The kernel's BTF as aya parses it, for the off-CPU programs.
    pub typed_programs: bool,
    /// xtrace's index of the kernel's BTF, asked while a sampling or off-CPU capture is prepared.
    pub kernel_btf: bool,
}

impl Wanted {
    /// Whether the kernel's BTF is read at all: for xtrace's index or for aya's parse of it.
    fn any_btf(self) -> bool {
        self.kernel_btf || self.typed_programs
    }
}

/// The parses under way; [`Parsing::join`] waits for them.
pub struct Parsing {
    loader: Pending<EbpfLoader<'static>>,
    btf: Pending<Option<TypesBtf>>,
}

/// Work on a thread of its own, or, when none could be started, left for the join.
enum Pending<T> {
    Thread(JoinHandle<T>),
    Later(fn(Wanted) -> T, Wanted),
}

impl<T: Send + 'static> Pending<T> {
    fn start(name: &str, work: fn(Wanted) -> T, wanted: Wanted) -> Pending<T> {
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || work(wanted));
        match spawned {
            Ok(handle) => Pending::Thread(handle),
            Err(_) => Pending::Later(work, wanted),
        }
    }

    fn join(self) -> T {
        match self {
            Pending::Thread(handle) => match handle.join() {
                Ok(done) => done,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Pending::Later(work, wanted) => work(wanted),
        }
    }
}

/// The kernel's BTF as aya parses it, for the programs typed by it, or why it could not.
pub type TypesBtf = Result<Btf, BtfError>;

/// What the threads made.
pub struct Parsed {
    /// A loader with no kernel BTF.
    pub loader: EbpfLoader<'static>,
    /// The kernel's BTF for BTF-typed programs, when asked for.
    pub btf: Option<TypesBtf>,
}

impl Parsed {
    /// Parses here and now what `wanted` says, and the loader.
    pub fn parse(wanted: Wanted) -> Parsed {
        Parsed {
            btf: read_btf(wanted),
            loader: make_loader(wanted),
        }
    }
}

/// aya's loader, without the kernel's BTF, once aya has probed the kernel's features (which its
/// first load would do).
fn make_loader(_: Wanted) -> EbpfLoader<'static> {
    aya::features();
    let mut loader = EbpfLoader::new();
    loader.btf(None);
    loader
}

/// The kernel's BTF as `wanted` says: xtrace's index, shared with the planning thread, which
/// waits for this read instead of making its own, and aya's parse of the same bytes.
fn read_btf(wanted: Wanted) -> Option<TypesBtf> {
    let kernel = wanted.any_btf().then(KernelBtf::shared);
    wanted.typed_programs.then(|| match &kernel {
        Some(Ok(kernel)) => Btf::parse(kernel.bytes(), Endianness::default()),
        _ => Btf::from_sys_fs(),
    })
}

impl Parsing {
    /// Starts the threads: one makes the loader, one (when `wanted` asks for anything) reads the
    /// kernel's BTF. Two, so that neither waits for the other: aya's loader parses the kernel's
    /// BTF on its own.
    pub fn start(wanted: Wanted) -> Parsing {
        let btf = if wanted.any_btf() {
            Pending::start("xtrace-btf", read_btf, wanted)
        } else {
            Pending::Later(read_btf, wanted)
        };
        Parsing {
            loader: Pending::start("xtrace-loader", make_loader, wanted),
            btf,
        }
    }

    /// Parsed now, when the load comes (no thread).
    pub fn later(wanted: Wanted) -> Parsing {
        Parsing {
            loader: Pending::Later(make_loader, wanted),
            btf: Pending::Later(read_btf, wanted),
        }
    }

    /// The loader and the BTF, once the threads are done.
    pub fn join(self) -> Parsed {
        Parsed {
            btf: self.btf.join(),
            loader: self.loader.join(),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The loader goes without the kernel's BTF: that is right only while the object asks for no
    /// CO-RE relocation (aya would leave one unapplied, and the verifier refuse the program).
    #[test]
    fn the_object_has_no_core_relocation_to_apply() {
        let object = aya_obj::Object::parse(super::super::OBJECT).expect("the embedded object parses");
        assert!(!object.has_btf_relocations());
    }
}

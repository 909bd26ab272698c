//! aya's loader, made on a thread of its own while the probes are planned. aya 0.14's
//! `EbpfLoader::new` always parses the kernel's BTF (`/sys/kernel/btf/vmlinux`, several MB): tens
//! of milliseconds on a host, about half a second under software emulation, on the path from
//! xtrace's start to its first probe. xtrace's object has no CO-RE relocation for that BTF to serve
//! (a test below says so), so the loader goes without it, and the parse, and dropping what it
//! built, happen beside the planning instead of before the load. The off-CPU programs, which are
//! typed by the kernel's BTF, get their own parse on the same thread.
use std::thread::JoinHandle;

use aya::{Btf, BtfError, EbpfLoader};

/// The parses under way; [`Parsing::join`] waits for them.
pub enum Parsing {
    Thread(JoinHandle<Parsed>),
    /// No thread could be started: parsed when joined, as before.
    Later {
        typed_programs: bool,
    },
}

/// The kernel's BTF as aya parses it, for the programs typed by it, or why it could not.
pub type TypesBtf = Result<Btf, BtfError>;

/// What the thread made.
pub struct Parsed {
    /// A loader with no kernel BTF.
    pub loader: EbpfLoader<'static>,
    /// The kernel's BTF for BTF-typed programs, when asked for.
    pub btf: Option<TypesBtf>,
}

impl Parsed {
    /// Parses here and now; `typed_programs`: the BTF for BTF-typed programs too.
    pub fn parse(typed_programs: bool) -> Parsed {
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        Parsed {
            loader,
            btf: typed_programs.then(Btf::from_sys_fs),
        }
    }
}

impl Parsing {
    /// Starts the thread; `typed_programs`: parse the BTF the off-CPU programs are loaded with too.
    pub fn start(typed_programs: bool) -> Parsing {
        let spawned = std::thread::Builder::new()
            .name("xtrace-btf".into())
            .spawn(move || Parsed::parse(typed_programs));
        match spawned {
            Ok(handle) => Parsing::Thread(handle),
            Err(_) => Parsing::Later { typed_programs },
        }
    }

    /// The loader and the BTF, once the thread is done.
    pub fn join(self) -> Parsed {
        match self {
            Parsing::Thread(handle) => match handle.join() {
                Ok(parsed) => parsed,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Parsing::Later { typed_programs } => Parsed::parse(typed_programs),
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

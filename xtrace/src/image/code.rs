//! Naming a code address of a process for a person: the module and file offset of the mapping
//! that held it, and the function there with the offset into it, through the image model and its
//! symbols. The CUDA kernel namer (a host stub is a function's start) and `--stacks`' call sites
//! (a return address, anywhere in a function) both ask it.
use super::Images;
use crate::{elf::symbolize::module_name, procfs};

/// Where a code address lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeAt {
    /// The mapped file's name (`libc.so.6`), or the special mapping's (`[vdso]`).
    pub module: String,
    /// The address's offset in that file.
    pub file_offset: u64,
    /// The function holding it and the offset into it, when the file's symbols name one (raw,
    /// as the symbol table has it).
    pub function: Option<(String, u64)>,
}

impl CodeAt {
    /// `module+0xOFF`, the name of an address in no named function.
    pub fn in_module(&self) -> String {
        format!("{}+{:#x}", self.module, self.file_offset)
    }
}

impl Images {
    /// Where `address` lay in process `pid` at `ns`; None when no mapping of the process held it
    /// (not code: a handle, or a library the process no longer maps). A mapping the image model
    /// does not know yet (a library loaded within its last read) is looked for in what the
    /// process maps now, while it lives.
    pub fn code_at(&mut self, pid: u32, ns: u64, address: u64) -> Option<CodeAt> {
        let mapping = self.mapping_at(pid, ns, address).cloned().or_else(|| {
            let now = procfs::read_maps(pid)?;
            procfs::find(&now, address).cloned()
        })?;
        let file_offset = address - mapping.start + mapping.offset;
        let module = module_name(&mapping.path).to_string();
        let function = match mapping.path.starts_with('/') {
            // Through the process's root (containers); once it has exited, by the path itself.
            true => {
                let open = self.open_path(pid, &mapping).unwrap_or_default();
                self.symbols
                    .function(&open, file_offset)
                    .map(|f| (f.name, f.offset))
            }
            false => None,
        };
        Some(CodeAt {
            module,
            file_offset,
            function,
        })
    }
}

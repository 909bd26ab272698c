//! The few facts xtrace reads from the kernel's own BTF (`/sys/kernel/btf/vmlinux`, readable by
//! every user, so neither root nor a tracefs mount is needed): where a member lies in a kernel
//! struct, and how many arguments a raw tracepoint passes (its `btf_trace_NAME` typedef, a pointer
//! to the probe's prototype). A reader of the format's type and string sections as the kernel's
//! Documentation/bpf/btf.rst lays them out, not a general BTF library.
use std::{
    ops::Range,
    sync::{Arc, Mutex, PoisonError},
};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const MAGIC: u16 = 0xeb9f;
/// The fixed part of every type record: name offset, info, size or type.
const RECORD: usize = 12;

const KIND_PTR: u32 = 2;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC_PROTO: u32 = 13;

/// The kernel's BTF of the capture being prepared (see [`KernelBtf::shared`]).
static SHARED: Mutex<Option<Arc<KernelBtf>>> = Mutex::new(None);

/// The kernel's BTF: its bytes and where each type's record starts (type id i at `types[i - 1]`).
pub struct KernelBtf {
    data: Vec<u8>,
    types: Vec<usize>,
    strings: Range<usize>,
}

/// One type record's fixed part.
#[derive(Clone, Copy)]
struct Type {
    at: usize,
    name: u32,
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// The size (structs, unions, ints) or the type referred to (pointers, typedefs, ...).
    size_or_type: u32,
}

impl KernelBtf {
    /// Reads the running kernel's BTF.
    pub fn read() -> std::io::Result<KernelBtf> {
        let data = std::fs::read(VMLINUX).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{VMLINUX}: {e} (a kernel built with CONFIG_DEBUG_INFO_BTF has it)"),
            )
        })?;
        Self::parse(data).map_err(|reason| std::io::Error::other(format!("{VMLINUX}: {reason}")))
    }

    /// The kernel's BTF, read at the first call since [`KernelBtf::release`] and shared until
    /// then. Preparing a capture asks it several questions from several modules (whether off-CPU
    /// time can be measured, where `task_struct`'s members lie, how to follow child processes):
    /// one read of several MB, not one per question. A caller that comes while another reads
    /// waits for that read (the xtrace-btf thread reads it beside the planning). A failed read is
    /// not kept: the next call tries again.
    pub fn shared() -> std::io::Result<Arc<KernelBtf>> {
        let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(btf) = &*shared {
            return Ok(Arc::clone(btf));
        }
        let btf = Arc::new(Self::read()?);
        *shared = Some(Arc::clone(&btf));
        Ok(btf)
    }

    /// Lets the shared BTF go (its memory goes with its last holder): everything loaded, no
    /// question is left for it while the capture runs.
    pub fn release() {
        SHARED.lock().unwrap_or_else(PoisonError::into_inner).take();
    }

    /// The BTF's bytes, as read.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Indexes BTF bytes in this machine's byte order.
    pub fn parse(data: Vec<u8>) -> Result<KernelBtf, String> {
        let u16_at = |at: usize| data.get(at..at + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
        if u16_at(0) != Some(MAGIC) {
            return Err("not BTF (no 0xeb9f magic)".into());
        }
        let header = |field: usize| u32_at(&data, 4 + 4 * field).map(|v| v as usize);
        let (Some(header_len), Some(type_off), Some(type_len), Some(str_off), Some(str_len)) =
            (header(0), header(1), header(2), header(3), header(4))
        else {
            return Err("its header is cut short".into());
        };
        let types_at = header_len + type_off;
        let types_end = types_at + type_len;
        let strings = header_len + str_off..header_len + str_off + str_len;
        if types_end > data.len() || strings.end > data.len() {
            return Err("its sections run past its end".into());
        }
        let mut types = Vec::new();
        let mut at = types_at;
        while at < types_end {
            let info = u32_at(&data, at + 4).ok_or("a type record is cut short")?;
            let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            let extra = match kind {
                // INT, VAR, DECL_TAG: one word.
                1 | 14 | 17 => 4,
                // ARRAY: element type, index type, count.
                3 => 12,
                // STRUCT, UNION, DATASEC, ENUM64: three words a member.
                4 | 5 | 15 | 19 => 12 * vlen,
                // ENUM, FUNC_PROTO: two words a member.
                6 | 13 => 8 * vlen,
                // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG: nothing.
                2 | 7..=12 | 16 | 18 => 0,
                _ => return Err(format!("type {} has unknown kind {kind}", types.len() + 1)),
            };
            types.push(at);
            at += RECORD + extra;
        }
        if at != types_end {
            return Err("its last type record runs past the type section".into());
        }
        Ok(KernelBtf { data, types, strings })
    }

    fn ty(&self, id: u32) -> Option<Type> {
        let at = *self.types.get((id as usize).checked_sub(1)?)?;
        let info = u32_at(&self.data, at + 4)?;
        Some(Type {
            at,
            name: u32_at(&self.data, at)?,
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 != 0,
            size_or_type: u32_at(&self.data, at + 8)?,
        })
    }

    /// The string at `offset` in the string section.
    fn name(&self, offset: u32) -> &[u8] {
        let start = self.strings.start + offset as usize;
        let Some(rest) = self.data.get(start..self.strings.end) else {
            return b"";
        };
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    /// The id of the first type of `kind` named `name`.
    fn find(&self, kind: u32, name: &str) -> Option<u32> {
        (1..=self.types.len() as u32).find(|&id| {
            self.ty(id)
                .is_some_and(|t| t.kind == kind && self.name(t.name) == name.as_bytes())
        })
    }

    /// The byte offset of `member` in struct `name`, looking into its anonymous structs and
    /// unions; None if there is no such member or it is a bitfield.
    pub fn member_offset(&self, name: &str, member: &str) -> Option<u32> {
        self.offset_in(self.find(KIND_STRUCT, name)?, member, 0)
    }

    /// The size in bytes of struct `name`.
    pub fn struct_size(&self, name: &str) -> Option<u32> {
        Some(self.ty(self.find(KIND_STRUCT, name)?)?.size_or_type)
    }

    fn offset_in(&self, id: u32, member: &str, base_bits: u32) -> Option<u32> {
        let t = self.ty(id)?;
        if t.kind != KIND_STRUCT && t.kind != KIND_UNION {
            return None;
        }
        for i in 0..t.vlen {
            let at = t.at + RECORD + 12 * i;
            let (name, ty, offset) = (
                u32_at(&self.data, at)?,
                u32_at(&self.data, at + 4)?,
                u32_at(&self.data, at + 8)?,
            );
            // With the kind flag, the top byte is a bitfield's size and the rest its bit offset.
            let (bits, bitfield) = if t.kind_flag {
                (offset & 0xff_ffff, offset >> 24 != 0)
            } else {
                (offset, false)
            };
            if name == 0 {
                if let Some(found) = self.offset_in(ty, member, base_bits + bits) {
                    return Some(found);
                }
            } else if self.name(name) == member.as_bytes() {
                let bits = base_bits + bits;
                return (!bitfield && bits.is_multiple_of(8)).then_some(bits / 8);
            }
        }
        None
    }

    /// The type id of raw tracepoint `name`'s `btf_trace_NAME` typedef, which a BTF-typed
    /// tracepoint program names as the point it attaches to; None when this kernel has no such
    /// tracepoint.
    pub fn tracepoint_type_id(&self, name: &str) -> Option<u32> {
        self.find(KIND_TYPEDEF, &format!("btf_trace_{name}"))
    }

    /// How many arguments raw tracepoint `name` passes (its probe's prototype less the leading
    /// `void *`), or None when this kernel has no such tracepoint.
    pub fn tracepoint_args(&self, name: &str) -> Option<usize> {
        let typedef = self.ty(self.find(KIND_TYPEDEF, &format!("btf_trace_{name}"))?)?;
        let pointer = self.ty(typedef.size_or_type).filter(|t| t.kind == KIND_PTR)?;
        let proto = self
            .ty(pointer.size_or_type)
            .filter(|t| t.kind == KIND_FUNC_PROTO)?;
        proto.vlen.checked_sub(1)
    }
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    data.get(at..at + 4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BTF bytes of `types` (each record's words) and `strings` (NUL-separated, leading NUL).
    fn btf(types: &[&[u32]], strings: &[u8]) -> Vec<u8> {
        let words: Vec<u32> = types.iter().flat_map(|t| t.iter().copied()).collect();
        let type_len = 4 * words.len() as u32;
        let mut data = Vec::new();
        data.extend_from_slice(&MAGIC.to_ne_bytes());
        data.extend_from_slice(&[1, 0]);
        for word in [24, 0, type_len, type_len, strings.len() as u32] {
            data.extend_from_slice(&word.to_ne_bytes());
        }
        for word in words {
            data.extend_from_slice(&word.to_ne_bytes());
        }
        data.extend_from_slice(strings);
        data
    }

    const fn info(kind: u32, vlen: u32, kind_flag: bool) -> u32 {
        (kind_flag as u32) << 31 | kind << 24 | vlen
    }

    // Strings: 1 "int", 5 "task", 10 "pid", 14 "flags", 20 "btf_trace_exit", 35 "tgid".
    const STRINGS: &[u8] = b"\0int\0task\0pid\0flags\0btf_trace_exit\0tgid\0";

    fn sample() -> KernelBtf {
        KernelBtf::parse(btf(
            &[
                // 1: int, 4 bytes.
                &[1, info(1, 0, false), 4, 32],
                // 2: struct task { int flags (bit 0); union { int pid (bit 0) } (bit 64) ;
                //    int tgid:3 (bit 96, a bitfield) }, with the kind flag.
                &[
                    5,
                    info(KIND_STRUCT, 3, true),
                    16,
                    14,
                    1,
                    0,
                    0,
                    3,
                    64,
                    35,
                    1,
                    3 << 24 | 96,
                ],
                // 3: an anonymous union { int pid }.
                &[0, info(KIND_UNION, 1, false), 4, 10, 1, 0],
                // 4: typedef btf_trace_exit -> 5 (pointer) -> 6 (prototype of three arguments).
                &[20, info(KIND_TYPEDEF, 0, false), 5],
                &[0, info(KIND_PTR, 0, false), 6],
                &[0, info(KIND_FUNC_PROTO, 3, false), 0, 0, 0, 0, 2, 0, 1],
            ],
            STRINGS,
        ))
        .unwrap()
    }

    #[test]
    fn member_offsets_through_anonymous_members() {
        let btf = sample();
        assert_eq!(btf.member_offset("task", "flags"), Some(0));
        assert_eq!(btf.member_offset("task", "pid"), Some(8));
        assert_eq!(btf.member_offset("task", "tgid"), None, "a bitfield");
        assert_eq!(btf.member_offset("task", "comm"), None);
        assert_eq!(btf.member_offset("mm", "pid"), None);
    }

    #[test]
    fn tracepoint_arguments_from_the_typedef() {
        let btf = sample();
        assert_eq!(btf.tracepoint_args("exit"), Some(2));
        assert_eq!(btf.tracepoint_args("fork"), None);
    }

    #[test]
    fn malformed_btf_is_an_error() {
        assert!(KernelBtf::parse(b"not btf at all, no".to_vec()).is_err());
        let mut cut = btf(&[&[1, info(1, 0, false), 4, 32]], STRINGS);
        cut.truncate(30);
        assert!(KernelBtf::parse(cut).is_err());
        let unknown = btf(&[&[1, info(31, 0, false), 4]], STRINGS);
        let error = KernelBtf::parse(unknown)
            .err()
            .expect("an unknown kind is refused");
        assert!(error.contains("unknown kind 31"), "{error}");
    }

    #[test]
    fn this_kernel() {
        // xtrace needs the kernel's BTF anyway (its per-thread storage is a BTF map).
        let btf = KernelBtf::read().expect("this kernel's BTF");
        assert!(btf.member_offset("task_struct", "pid").is_some());
        assert!(btf.member_offset("task_struct", "tgid").is_some());
        assert_eq!(btf.tracepoint_args("task_newtask"), Some(2));
        assert!(btf.tracepoint_args("sched_process_exit").is_some());
    }

    #[test]
    fn the_shared_btf_is_read_once_until_released() {
        let first = KernelBtf::shared().expect("this kernel's BTF");
        let again = KernelBtf::shared().expect("this kernel's BTF");
        assert!(Arc::ptr_eq(&first, &again), "read twice");
        KernelBtf::release();
        let after = KernelBtf::shared().expect("this kernel's BTF");
        assert!(!Arc::ptr_eq(&first, &after), "kept after its release");
        assert_eq!(after.bytes(), first.bytes());
        KernelBtf::release();
    }
}

//! Where each CPython minor version keeps what the frame walk and the naming read: per-version
//! tables for 3.10 to 3.12 (offsets printed by a C program compiled against each version's own
//! internal headers, see docs/internals/python.md), and for 3.13 the `_Py_DebugOffsets` the
//! interpreter itself keeps at the start of `_PyRuntime`, read from the live process.
use xtrace_common::python::{PyLayout, PY_KIND_FRAME_OBJECTS, PY_KIND_IS_ENTRY, PY_KIND_SHIM, PY_NO_FIELD};

/// The cookie that opens `_Py_DebugOffsets` (3.13+).
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// What user space reads of a code object and its strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeLayout {
    /// `PyCodeObject.co_filename`.
    pub filename: u32,
    /// `co_name`.
    pub name: u32,
    /// `co_qualname`; None before 3.11.
    pub qualname: Option<u32>,
    /// `co_linetable`: the location table (3.11+) or the 3.10 line table, a bytes object.
    pub linetable: u32,
    /// `co_firstlineno`.
    pub firstlineno: u32,
    /// Where the instructions start in the code object (`co_code_adaptive`, 3.11+); None in
    /// 3.10, whose `f_lasti` counts code units from the start of `co_code`.
    pub code_adaptive: Option<u32>,
    /// `_co_firsttraceable` (3.11+): frames stopped before it have not begun their body.
    pub firsttraceable: Option<u32>,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's characters start.
    pub ascii_size: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where a compact non-ASCII string's start.
    pub compact_size: u32,
}

/// A minor version's layout: for the kernel's walk and for naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub walk: PyLayout,
    pub code: CodeLayout,
    /// `PyThreadState.interp`, to check a thread state against its interpreter.
    pub tstate_interp: u32,
}

/// The layout of CPython 3.`minor` for the minors with a table here (3.10 to 3.12); 3.13 reads
/// its own ([`from_debug_offsets`]); None for the others.
pub fn table(minor: u32) -> Option<Layout> {
    let (walk, code, tstate_interp) = match minor {
        10 => (
            walk(
                PY_KIND_FRAME_OBJECTS,
                [32, 8, 8, 176, 24],
                PY_NO_FIELD,
                [32, 24, 96],
                [PY_NO_FIELD, PY_NO_FIELD],
                [40, 112],
            ),
            CodeLayout {
                filename: 104,
                name: 112,
                qualname: None,
                linetable: 120,
                firstlineno: 40,
                code_adaptive: None,
                firsttraceable: None,
                ascii_size: 48,
                compact_size: 72,
            },
            16,
        ),
        11 => (
            walk(
                PY_KIND_IS_ENTRY,
                [40, 16, 8, 152, 56],
                8,
                [32, 48, 56],
                [69, 68],
                [72, 120],
            ),
            CodeLayout {
                filename: 112,
                name: 120,
                qualname: Some(128),
                linetable: 136,
                firstlineno: 72,
                code_adaptive: Some(184),
                firsttraceable: Some(168),
                ascii_size: 48,
                compact_size: 72,
            },
            16,
        ),
        12 => (
            walk(
                PY_KIND_SHIM,
                [40, 72, 8, 136, 56],
                0,
                [0, 8, 56],
                [70, PY_NO_FIELD],
                [68, 120],
            ),
            CodeLayout {
                filename: 112,
                name: 120,
                qualname: Some(128),
                linetable: 136,
                firstlineno: 68,
                code_adaptive: Some(192),
                firsttraceable: Some(176),
                ascii_size: 40,
                compact_size: 56,
            },
            16,
        ),
        _ => return None,
    };
    Some(Layout {
        walk,
        code,
        tstate_interp,
    })
}

/// A walk layout from its offsets: `runtime` is (interpreters head, threads head, tstate next,
/// thread id, tstate frame); `frame` (code, previous, instruction); `marks` (owner, is_entry);
/// `code` (firstlineno, name).
fn walk(
    kind: u32,
    runtime: [u32; 5],
    cframe_current: u32,
    frame: [u32; 3],
    marks: [u32; 2],
    code: [u32; 2],
) -> PyLayout {
    let end = |offsets: &[u32], size: u32| {
        offsets
            .iter()
            .filter(|&&o| o != PY_NO_FIELD)
            .map(|o| o + size)
            .max()
    };
    let frame_bytes = end(&frame[..2], 8)
        .max(end(
            &frame[2..],
            if kind == PY_KIND_FRAME_OBJECTS { 4 } else { 8 },
        ))
        .max(end(&marks, 1))
        .unwrap_or(0);
    let code_bytes = (code[0] + 4).max(code[1] + 8);
    PyLayout {
        runtime: 0,
        kind,
        interpreters_head: runtime[0],
        threads_head: runtime[1],
        tstate_next: runtime[2],
        tstate_thread_id: runtime[3],
        tstate_frame: runtime[4],
        cframe_current,
        frame_code: frame[0],
        frame_previous: frame[1],
        frame_instr: frame[2],
        frame_owner: marks[0],
        frame_is_entry: marks[1],
        code_firstlineno: code[0],
        code_name: code[1],
        frame_bytes: frame_bytes.next_multiple_of(8),
        code_bytes: code_bytes.next_multiple_of(8),
    }
}

/// Bytes of 3.13's `_Py_DebugOffsets` that xtrace reads.
pub const DEBUG_OFFSETS_LEN: usize = 368;

/// The layout of a 3.13 interpreter from the `_Py_DebugOffsets` at the start of its
/// `_PyRuntime` (`bytes`, at least [`DEBUG_OFFSETS_LEN`] long); None when the cookie is not there,
/// or the build is free-threaded (its objects differ), or an offset is past what the walk reads.
/// The struct's own layout is 3.13's: it changes between minors.
pub fn from_debug_offsets(bytes: &[u8]) -> Result<Layout, String> {
    let at = |i: usize| -> u32 {
        let word = bytes
            .get(i..i + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        u32::try_from(word).unwrap_or(u32::MAX)
    };
    if bytes.len() < DEBUG_OFFSETS_LEN || &bytes[..8] != DEBUG_COOKIE {
        return Err("no \"xdebugpy\" cookie at the start of _PyRuntime".into());
    }
    if at(16) != 0 {
        return Err("a free-threaded build, whose objects xtrace does not know".into());
    }
    // runtime_state at 24, interpreter_state at 48, thread_state at 152, interpreter_frame at 224,
    // code_object at 272, pyobject at 352 (each begins with its struct's size).
    let walk = walk(
        PY_KIND_SHIM,
        [at(40), at(72), at(168), at(192), at(184)],
        PY_NO_FIELD,
        [at(240), at(232), at(248)],
        [at(264), PY_NO_FIELD],
        [at(312), at(288)],
    );
    if walk.frame_bytes > xtrace_common::python::PY_WINDOW as u32
        || walk.code_bytes > xtrace_common::python::PY_WINDOW as u32
    {
        return Err("its frame or code object fields lie past what the walk reads".into());
    }
    let code = CodeLayout {
        filename: at(280),
        name: at(288),
        qualname: Some(at(296)),
        linetable: at(304),
        firstlineno: at(312),
        code_adaptive: Some(at(344)),
        // Not among the debug offsets; 3.13's place (checked against its headers).
        firsttraceable: Some(184),
        ascii_size: 40,
        compact_size: 56,
    };
    Ok(Layout {
        walk,
        code,
        tstate_interp: at(176),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_read_windows_that_cover_their_fields() {
        let l10 = table(10).unwrap().walk;
        assert_eq!((l10.frame_bytes, l10.code_bytes), (104, 120));
        let l11 = table(11).unwrap().walk;
        assert_eq!((l11.frame_bytes, l11.code_bytes), (72, 128));
        let l12 = table(12).unwrap().walk;
        assert_eq!((l12.frame_bytes, l12.code_bytes), (72, 128));
        assert!(table(9).is_none() && table(13).is_none() && table(14).is_none());
    }

    #[test]
    fn debug_offsets_without_their_cookie_are_refused() {
        let bytes = vec![0u8; DEBUG_OFFSETS_LEN];
        assert!(from_debug_offsets(&bytes).unwrap_err().contains("cookie"));
        let mut free = bytes.clone();
        free[..8].copy_from_slice(DEBUG_COOKIE);
        free[16] = 1;
        assert!(from_debug_offsets(&free).unwrap_err().contains("free-threaded"));
    }
}

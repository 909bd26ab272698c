//! Putting a sample's Python frames where they ran: the chain is split at its entry frames into
//! one part per call of the eval loop, and each part replaces the native
//! `_PyEval_EvalFrameDefault` frame that ran it, innermost first, so Python and native frames
//! interleave as they called each other (a Python function, `sorted` in C, the Python key
//! function it calls). Parts left over when the native unwind stopped before reaching their eval
//! frames go at the root under `[truncated]`, never dropped.
//!
//! A Python frame is named `qualname (file.py:LINE)`, LINE being the function's definition
//! line: one frame per function in flame graphs, whatever line it was at. The line sampled is
//! kept with each frame (`PyName::line`) for exports that carry lines. The file is shown by its
//! module path ([`module_path`]): `torch/nn/modules/module.py` in any virtualenv.
use super::{PyName, ENTRY_BIT};

/// The native function that runs Python frames.
pub const EVAL_FRAME: &str = "_PyEval_EvalFrameDefault";
/// How the perf map of a CPython run with `-X perf` names its trampolines: `py::QUALNAME:FILE`.
pub const PERF_TRAMPOLINE: &str = "py::";
/// The root under which Python frames go that no native eval frame was found for.
pub const TRUNCATED: &str = "[truncated]";

/// The frame name of `name`: `qualname (file.py:DEF_LINE)`.
pub fn frame_name(name: &PyName) -> String {
    if name.filename.is_empty() {
        return name.qualname.clone();
    }
    let file = module_path(&name.filename);
    format!("{} ({file}:{})", name.qualname, name.def_line)
}

/// How a Python file is shown: its path below the import directory it was found in
/// (`site-packages`, `dist-packages`, or the standard library's `lib/pythonX.Y`), so that a module
/// is named alike in two virtualenvs or two installs (and `report` and `diff` pair it), and two
/// modules of one file name apart (`torch/nn/modules/module.py`, `concurrent/futures/thread.py`);
/// any other file (the program's own, a frozen module) by its file name.
pub fn module_path(filename: &str) -> &str {
    for packages in ["/site-packages/", "/dist-packages/"] {
        if let Some(at) = filename.rfind(packages) {
            return &filename[at + packages.len()..];
        }
    }
    if let Some(below) = below_stdlib(filename) {
        return below;
    }
    filename.rsplit('/').next().unwrap_or(filename)
}

/// The part of `filename` below a standard library directory `.../lib/pythonX.Y/` (or a
/// free-threaded build's `pythonX.Yt`), if it is in one.
fn below_stdlib(filename: &str) -> Option<&str> {
    const LIB: &str = "/lib/python";
    let mut from = 0;
    while let Some(at) = filename[from..].find(LIB) {
        let rest = &filename[from + at + LIB.len()..];
        let version = rest.split('/').next().unwrap_or("");
        let digits = version.strip_suffix('t').unwrap_or(version);
        let numbered = digits
            .split_once('.')
            .is_some_and(|(major, minor)| is_number(major) && is_number(minor));
        if numbered && rest.len() > version.len() + 1 {
            return Some(&rest[version.len() + 1..]);
        }
        from += at + LIB.len();
    }
    None
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// `native` (outermost first) with each eval frame replaced by the Python frames it ran, from
/// `python` (ids into `labels`, the frames' names as [`frame_name`] gives them, innermost first,
/// `ENTRY_BIT` on the outermost of each part).
pub fn stitch(native: Vec<String>, python: &[u32], labels: &[String]) -> Vec<String> {
    if python.is_empty() {
        return native;
    }
    // CPython's perf trampolines (`-X perf`) name the Python function each eval frame runs,
    // which its Python frame now says: kept only where no walk came.
    let native = native.into_iter().filter(|f| !f.starts_with(PERF_TRAMPOLINE));
    let name = |id: u32| {
        labels
            .get((id & !ENTRY_BIT) as usize)
            .map_or_else(|| "?".to_string(), String::clone)
    };
    // Parts, innermost first, each innermost first.
    let mut parts: Vec<Vec<String>> = Vec::new();
    let mut part = Vec::new();
    for &id in python {
        part.push(name(id));
        if id & ENTRY_BIT != 0 {
            parts.push(std::mem::take(&mut part));
        }
    }
    if !part.is_empty() {
        parts.push(part);
    }
    let mut parts = parts.into_iter();
    let mut inner_first: Vec<String> = Vec::with_capacity(python.len() + 32);
    for frame in native.rev() {
        if frame == EVAL_FRAME {
            if let Some(part) = parts.next() {
                inner_first.extend(part);
                continue;
            }
        }
        inner_first.push(frame);
    }
    let left: Vec<Vec<String>> = parts.collect();
    if !left.is_empty() {
        inner_first.extend(left.into_iter().flatten());
        inner_first.push(TRUNCATED.to_string());
    }
    inner_first.reverse();
    inner_first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_shown_by_their_module_path() {
        let cases = [
            (
                "/home/u/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
                "torch/nn/modules/module.py",
            ),
            (
                "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py",
                "torch/nn/modules/module.py",
            ),
            (
                "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
                "numpy/core/numeric.py",
            ),
            (
                "/usr/lib/python3.11/concurrent/futures/thread.py",
                "concurrent/futures/thread.py",
            ),
            (
                "/root/.pyenv/versions/3.12.1/lib/python3.12/threading.py",
                "threading.py",
            ),
            ("/usr/local/lib/python3.13t/json/decoder.py", "json/decoder.py"),
            // Not a standard library directory: the file name.
            ("/srv/lib/python-tools/run.py", "run.py"),
            ("/usr/lib/python3.11", "python3.11"),
            ("/work/app/train.py", "train.py"),
            ("train.py", "train.py"),
            ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap>"),
        ];
        for (file, shown) in cases {
            assert_eq!(module_path(file), shown, "{file}");
        }
    }

    fn names() -> Vec<PyName> {
        ["main", "caller", "key", "hot"]
            .iter()
            .enumerate()
            .map(|(i, n)| PyName {
                qualname: n.to_string(),
                filename: "/x/app.py".into(),
                def_line: i as u32 + 1,
                line: 0,
            })
            .collect()
    }

    fn labels() -> Vec<String> {
        names().iter().map(frame_name).collect()
    }

    fn native(frames: &[&str]) -> Vec<String> {
        frames.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_part_replaces_its_eval_frame_innermost_first() {
        // hot <- key | entry ; caller <- main | entry
        let python = [3, 2 | ENTRY_BIT, 1, ENTRY_BIT];
        let stack = native(&[
            "_start",
            "Py_RunMain",
            EVAL_FRAME,
            "builtin_sorted",
            EVAL_FRAME,
            "PyNumber_Add",
        ]);
        assert_eq!(
            stitch(stack, &python, &labels()),
            native(&[
                "_start",
                "Py_RunMain",
                "main (app.py:1)",
                "caller (app.py:2)",
                "builtin_sorted",
                "key (app.py:3)",
                "hot (app.py:4)",
                "PyNumber_Add"
            ])
        );
    }

    #[test]
    fn perf_trampolines_give_way_to_the_python_frames_they_name() {
        // Each Python call is an eval-loop call of its own through its trampoline.
        let python = [3 | ENTRY_BIT, 2 | ENTRY_BIT];
        let stack = native(&[
            "py_trampoline_evaluator",
            "py::key:/x/app.py",
            EVAL_FRAME,
            "PyObject_Vectorcall",
            "py_trampoline_evaluator",
            "py::hot:/x/app.py",
            EVAL_FRAME,
        ]);
        assert_eq!(
            stitch(stack.clone(), &python, &labels()),
            native(&[
                "py_trampoline_evaluator",
                "key (app.py:3)",
                "PyObject_Vectorcall",
                "py_trampoline_evaluator",
                "hot (app.py:4)",
            ])
        );
        // No walk (--no-python, an interpreter not recognised): the trampolines name the calls.
        assert_eq!(stitch(stack.clone(), &[], &labels()), stack);
    }

    #[test]
    fn parts_without_an_eval_frame_go_under_truncated_at_the_root() {
        let python = [3, 2 | ENTRY_BIT, 1, ENTRY_BIT];
        let stack = native(&[EVAL_FRAME, "PyNumber_Add"]);
        assert_eq!(
            stitch(stack, &python, &labels()),
            native(&[
                TRUNCATED,
                "main (app.py:1)",
                "caller (app.py:2)",
                "key (app.py:3)",
                "hot (app.py:4)",
                "PyNumber_Add"
            ])
        );
    }
}

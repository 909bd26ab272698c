//! The CUDA runtime and driver functions `--cuda` traces: which library exports each, what kind of
//! call it is, and where its interesting arguments live under the x86-64 SysV calling convention
//! (a `dim3` passed by value takes two registers: x and y packed in one, z in the next).
use xtrace_common::probe::args;

/// Which library exports a function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// `libcudart.so*`, or a main executable that links cudart statically.
    Runtime,
    /// `libcuda.so*`.
    Driver,
}

/// Where a value is at entry: an argument register or a stack slot (7th integer argument = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    Reg(usize),
    Stack(usize),
}

/// Direction of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    HostToHost,
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    /// `cudaMemcpyDefault` / `cuMemcpy`: inferred from unified addresses by CUDA itself.
    Default,
}

impl Direction {
    /// `cudaMemcpyKind` values 0..=4.
    pub fn from_kind(kind: u64) -> Option<Direction> {
        Some(match kind {
            0 => Direction::HostToHost,
            1 => Direction::HostToDevice,
            2 => Direction::DeviceToHost,
            3 => Direction::DeviceToDevice,
            4 => Direction::Default,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::HostToHost => "HtoH",
            Direction::HostToDevice => "HtoD",
            Direction::DeviceToHost => "DtoH",
            Direction::DeviceToDevice => "DtoD",
            Direction::Default => "default",
        }
    }
}

/// Which memory an allocation or free is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    Device,
    /// Page-locked host memory (`cudaHostAlloc`, PyTorch's `pin_memory`).
    PinnedHost,
}

/// Where a copy's direction comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A `cudaMemcpyKind` argument.
    Arg(Src),
    /// Fixed by the function (`cuMemcpyHtoD_v2`).
    Fixed(Direction),
}

/// What a traced function does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `cudaLaunchKernel(func, dim3 grid, dim3 block, args, sharedMem, stream)`.
    LaunchRuntime,
    /// `cudaLaunchKernelExC(const cudaLaunchConfig_t *config, func, args)`.
    LaunchRuntimeEx,
    /// `cuLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMem, stream, ...)`.
    LaunchDriver,
    /// `cuLaunchKernelEx(const CUlaunchConfig *config, f, params, extra)`.
    LaunchDriverEx,
    /// A copy of `bytes` (`rows`: multiplied by a row count, for 2D copies).
    Memcpy {
        bytes: Src,
        rows: Option<Src>,
        kind: Kind,
    },
    /// Sets `count` elements of `element` bytes (`rows` of them, for 2D memsets).
    Memset {
        count: Src,
        rows: Option<Src>,
        element: u64,
    },
    /// An allocation of `size` bytes (`rows` of them, for pitched allocations, whose row padding
    /// is not counted; `layers` times that, for 3D ones) whose address the call stores through
    /// argument `out`.
    Alloc {
        out: usize,
        size: Src,
        rows: Option<Src>,
        layers: Option<Src>,
        space: Space,
    },
    /// Frees the allocation at argument `ptr`.
    Free { ptr: usize, space: Space },
    /// Blocks until a stream, event, or the device is done.
    Sync,
    /// `cudaGraphLaunch` / `cuGraphLaunch`.
    GraphLaunch,
    /// `cuModuleGetFunction(CUfunction *out, module, name)` and `cuLibraryGetKernel`: names a handle.
    GetFunction,
    /// `cuKernelGetFunction(CUfunction *out, CUkernel kernel)`: another handle for a named kernel.
    KernelGetFunction,
}

impl Op {
    /// The category nested calls are de-duplicated by: a runtime call that calls the driver's
    /// function of the same category is one operation, not two.
    pub fn category(self) -> &'static str {
        match self {
            Op::LaunchRuntime | Op::LaunchRuntimeEx | Op::LaunchDriver | Op::LaunchDriverEx => "launch",
            Op::Memcpy { .. } => "memcpy",
            Op::Memset { .. } => "memset",
            Op::Alloc {
                space: Space::Device, ..
            } => "alloc",
            Op::Free {
                space: Space::Device, ..
            } => "free",
            Op::Alloc { .. } => "host_alloc",
            Op::Free { .. } => "host_free",
            Op::Sync => "sync",
            Op::GraphLaunch => "graph",
            Op::GetFunction | Op::KernelGetFunction => "function",
        }
    }

    /// The `ARG_SPECS` entry: every call captures its argument registers, so nesting is known.
    pub fn spec(self) -> u32 {
        let regs = (0..6).fold(0, |s, i| s | args::int(i));
        let src = |s: Src| match s {
            Src::Reg(_) => 0,
            Src::Stack(j) => args::stack(j),
        };
        regs | match self {
            // A kernel no lookup or symbol names is shown with the module that launched it.
            Op::LaunchRuntime => args::stack(0) | args::stack(1) | args::CALLER,
            Op::LaunchDriver => args::stack(0) | args::stack(1) | args::stack(2) | args::CALLER,
            Op::LaunchRuntimeEx | Op::LaunchDriverEx => args::block(0) | args::CALLER,
            Op::Memcpy { bytes, rows, kind } => {
                src(bytes)
                    | rows.map_or(0, src)
                    | match kind {
                        Kind::Arg(s) => src(s),
                        Kind::Fixed(_) => 0,
                    }
            }
            Op::Memset { count, rows, .. } => src(count) | rows.map_or(0, src),
            Op::Alloc {
                out,
                size,
                rows,
                layers,
                ..
            } => args::out(out) | src(size) | rows.map_or(0, src) | layers.map_or(0, src),
            Op::Free { .. } | Op::Sync | Op::GraphLaunch => 0,
            Op::GetFunction => args::out(0) | args::string(2),
            Op::KernelGetFunction => args::out(0),
        }
    }
}

/// One traced function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    pub name: &'static str,
    pub library: Library,
    pub op: Op,
}

const fn f(name: &'static str, library: Library, op: Op) -> Function {
    Function { name, library, op }
}

/// An allocation of `size` bytes of device memory, its address stored through the first argument.
const fn alloc(size: Src) -> Op {
    Op::Alloc {
        out: 0,
        size,
        rows: None,
        layers: None,
        space: Space::Device,
    }
}

/// `cudaMallocHost(void **ptr, size_t size)`, `cudaHostAlloc(void **ptr, size_t size, unsigned
/// flags)` and their driver forms: page-locked host memory.
const fn host_alloc() -> Op {
    Op::Alloc {
        out: 0,
        size: Reg(1),
        rows: None,
        layers: None,
        space: Space::PinnedHost,
    }
}

/// Frees the allocation at the first argument.
const fn free(space: Space) -> Op {
    Op::Free { ptr: 0, space }
}

/// `cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height)` and
/// `cuMemAllocPitch_v2(CUdeviceptr *ptr, size_t *pitch, size_t width, size_t height, unsigned
/// element)`: width x height bytes as asked (the pitch CUDA picks goes through a second out
/// pointer, which is not read).
const fn pitched_alloc() -> Op {
    Op::Alloc {
        out: 0,
        size: Reg(2),
        rows: Some(Reg(3)),
        layers: None,
        space: Space::Device,
    }
}

/// `cudaMalloc3D(cudaPitchedPtr *ptr, cudaExtent extent)`: width x height x depth bytes as asked.
/// The 24-byte extent is passed in memory, in the first three stack slots; the pitched pointer's
/// first field is the address. The pitch CUDA picks is its second field, which is not read.
const fn alloc_3d() -> Op {
    Op::Alloc {
        out: 0,
        size: Stack(0),
        rows: Some(Stack(1)),
        layers: Some(Stack(2)),
        space: Space::Device,
    }
}

const fn memset(count: Src, element: u64) -> Op {
    Op::Memset {
        count,
        rows: None,
        element,
    }
}

/// `cudaMemcpy2D[Async](dst, dpitch, src, spitch, width, height, kind[, stream])`: width x height
/// bytes, the kind in the first stack slot.
const fn copy_2d() -> Op {
    Op::Memcpy {
        bytes: Reg(4),
        rows: Some(Reg(5)),
        kind: Kind::Arg(Stack(0)),
    }
}

/// `cudaMemset2D[Async](ptr, pitch, value, width, height[, stream])`: width x height bytes.
const fn memset_2d() -> Op {
    Op::Memset {
        count: Reg(3),
        rows: Some(Reg(4)),
        element: 1,
    }
}

const fn copy(bytes: Src, kind: Kind) -> Op {
    Op::Memcpy {
        bytes,
        rows: None,
        kind,
    }
}

use Direction::*;
use Library::{Driver, Runtime};
use Src::{Reg, Stack};

/// Every function `--cuda` looks for.
pub const FUNCTIONS: &[Function] = &[
    f("cudaLaunchKernel", Runtime, Op::LaunchRuntime),
    f("cudaLaunchKernel_ptsz", Runtime, Op::LaunchRuntime),
    f("cudaLaunchKernelExC", Runtime, Op::LaunchRuntimeEx),
    f("cudaLaunchCooperativeKernel", Runtime, Op::LaunchRuntime),
    f("cudaLaunchKernelExC_ptsz", Runtime, Op::LaunchRuntimeEx),
    f("cudaMemcpy", Runtime, copy(Reg(2), Kind::Arg(Reg(3)))),
    f("cudaMemcpyAsync", Runtime, copy(Reg(2), Kind::Arg(Reg(3)))),
    f("cudaMemcpy2D", Runtime, copy_2d()),
    f("cudaMemcpy2DAsync", Runtime, copy_2d()),
    f("cudaMemcpyToSymbol", Runtime, copy(Reg(2), Kind::Arg(Reg(4)))),
    f("cudaMemcpyFromSymbol", Runtime, copy(Reg(2), Kind::Arg(Reg(4)))),
    f(
        "cudaMemcpyPeer",
        Runtime,
        copy(Reg(4), Kind::Fixed(DeviceToDevice)),
    ),
    f("cudaMemset", Runtime, memset(Reg(2), 1)),
    f("cudaMemsetAsync", Runtime, memset(Reg(2), 1)),
    f("cudaMemset2D", Runtime, memset_2d()),
    f("cudaMemset2DAsync", Runtime, memset_2d()),
    f("cudaMalloc", Runtime, alloc(Reg(1))),
    f("cudaMallocAsync", Runtime, alloc(Reg(1))),
    f("cudaMallocManaged", Runtime, alloc(Reg(1))),
    f("cudaMallocPitch", Runtime, pitched_alloc()),
    f("cudaMalloc3D", Runtime, alloc_3d()),
    f("cudaMallocHost", Runtime, host_alloc()),
    f("cudaHostAlloc", Runtime, host_alloc()),
    f("cudaFree", Runtime, free(Space::Device)),
    f("cudaFreeAsync", Runtime, free(Space::Device)),
    f("cudaFreeHost", Runtime, free(Space::PinnedHost)),
    f("cudaStreamSynchronize", Runtime, Op::Sync),
    f("cudaDeviceSynchronize", Runtime, Op::Sync),
    f("cudaEventSynchronize", Runtime, Op::Sync),
    f("cudaGraphLaunch", Runtime, Op::GraphLaunch),
    f("cuLaunchKernel", Driver, Op::LaunchDriver),
    f("cuLaunchKernel_ptsz", Driver, Op::LaunchDriver),
    f("cuLaunchKernelEx", Driver, Op::LaunchDriverEx),
    f("cuLaunchCooperativeKernel", Driver, Op::LaunchDriver),
    f("cuLaunchKernelEx_ptsz", Driver, Op::LaunchDriverEx),
    f("cuMemcpy", Driver, copy(Reg(2), Kind::Fixed(Default))),
    f("cuMemcpyAsync", Driver, copy(Reg(2), Kind::Fixed(Default))),
    f("cuMemcpyHtoD_v2", Driver, copy(Reg(2), Kind::Fixed(HostToDevice))),
    f("cuMemcpyDtoH_v2", Driver, copy(Reg(2), Kind::Fixed(DeviceToHost))),
    f(
        "cuMemcpyDtoD_v2",
        Driver,
        copy(Reg(2), Kind::Fixed(DeviceToDevice)),
    ),
    f(
        "cuMemcpyHtoDAsync_v2",
        Driver,
        copy(Reg(2), Kind::Fixed(HostToDevice)),
    ),
    f(
        "cuMemcpyDtoHAsync_v2",
        Driver,
        copy(Reg(2), Kind::Fixed(DeviceToHost)),
    ),
    f(
        "cuMemcpyDtoDAsync_v2",
        Driver,
        copy(Reg(2), Kind::Fixed(DeviceToDevice)),
    ),
    f("cuMemcpyPeer", Driver, copy(Reg(4), Kind::Fixed(DeviceToDevice))),
    f("cuMemsetD8_v2", Driver, memset(Reg(2), 1)),
    f("cuMemsetD16_v2", Driver, memset(Reg(2), 2)),
    f("cuMemsetD32_v2", Driver, memset(Reg(2), 4)),
    f("cuMemsetD8Async", Driver, memset(Reg(2), 1)),
    f("cuMemsetD16Async", Driver, memset(Reg(2), 2)),
    f("cuMemsetD32Async", Driver, memset(Reg(2), 4)),
    f("cuMemAlloc_v2", Driver, alloc(Reg(1))),
    f("cuMemAllocAsync", Driver, alloc(Reg(1))),
    f("cuMemAllocManaged", Driver, alloc(Reg(1))),
    f("cuMemAllocPitch_v2", Driver, pitched_alloc()),
    f("cuMemAllocHost_v2", Driver, host_alloc()),
    f("cuMemHostAlloc", Driver, host_alloc()),
    f("cuMemFree_v2", Driver, free(Space::Device)),
    f("cuMemFreeAsync", Driver, free(Space::Device)),
    f("cuMemFreeHost", Driver, free(Space::PinnedHost)),
    f("cuStreamSynchronize", Driver, Op::Sync),
    f("cuCtxSynchronize", Driver, Op::Sync),
    f("cuEventSynchronize", Driver, Op::Sync),
    f("cuGraphLaunch", Driver, Op::GraphLaunch),
    f("cuModuleGetFunction", Driver, Op::GetFunction),
    f("cuLibraryGetKernel", Driver, Op::GetFunction),
    f("cuKernelGetFunction", Driver, Op::KernelGetFunction),
];

/// The functions each library is expected to export: all but the `_ptsz`/`Ex` variants that
/// older releases lack, so a missing one is worth a notice.
pub fn expected(function: &Function) -> bool {
    !function.name.ends_with("_ptsz")
        && !matches!(function.op, Op::LaunchRuntimeEx | Op::LaunchDriverEx)
        && !matches!(
            function.name,
            "cuLibraryGetKernel"
                | "cuKernelGetFunction"
                | "cudaMallocAsync"
                | "cudaFreeAsync"
                | "cuMemAllocAsync"
                | "cuMemFreeAsync"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_specs_capture_what_ops_read() {
        let mut names: Vec<&str> = FUNCTIONS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FUNCTIONS.len());
        let launch = Op::LaunchDriver.spec();
        assert_ne!(
            launch & args::stack(2),
            0,
            "cuLaunchKernel's stream is the 9th argument"
        );
        let alloc = alloc(Reg(1)).spec();
        assert_eq!(alloc & args::OUT_MASK, args::out(0));
        assert_eq!(pitched_alloc().spec() & args::OUT_MASK, args::out(0));
        assert_ne!(Op::GetFunction.spec() & args::string(2), 0);
        assert_eq!(Direction::from_kind(2), Some(DeviceToHost));
        assert_eq!(Direction::from_kind(9), None);
    }
}

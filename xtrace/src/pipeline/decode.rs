//! Ring-buffer record decoding: the header's `kind` picks the payload; every length is checked
//! before a read, and records are read unaligned.
use xtrace_common::event::{
    ArgsEvent, EventHeader, LongStrEvent, OutEvent, SampleEvent, SpanEvent, SpanStrEvent, ThreadEvent,
    UsdtEvent, UsdtStrEvent, KIND_ARGS, KIND_EXEC, KIND_LONG_STR, KIND_OUT, KIND_PY_STACK, KIND_SAMPLE,
    KIND_SPAN, KIND_SPAN_STR, KIND_THREAD, KIND_USDT, KIND_USDT_STR, LONG_STR_AT, USDT_STRINGS_AT,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Span(SpanEvent),
    /// A span whose return value is read as a string (`-> str`).
    SpanStr(Box<SpanStrEvent>),
    Thread(ThreadEvent),
    Args(Box<ArgsEvent>),
    /// A long string argument (`str:N`) of the `Args` record that follows.
    LongStr(Box<LongStrEvent>),
    Usdt(UsdtEvent),
    UsdtStr(Box<UsdtStrEvent>),
    /// A CPU sample and the user stack bytes that follow it (empty with `--user-stack 0`).
    Sample(Box<SampleEvent>, Vec<u8>),
    /// A wait of at least `--off-cpu`'s MIN, and the sample of its thread's return from it.
    OffCpu(Box<xtrace_common::offcpu::OffCpuEvent>, Vec<u8>),
    Out(OutEvent),
    /// A thread other than its process's first ran exec (`KIND_EXEC`).
    Exec(ThreadEvent),
    /// The Python frames of the sample that follows.
    PyStack(Box<xtrace_common::python::PyStackEvent>),
    /// A GPU device record from the tool library (`KIND_GPU`).
    Gpu(Box<xtrace_common::gpu::GpuEvent>),
    /// A traced call's stack at its entry (`--stacks`).
    CallStack(Box<xtrace_common::stacks::CallStackEvent>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record of {len} bytes is shorter than the {need} its kind needs")]
    Short { len: usize, need: usize },
    #[error("unknown record kind {kind}")]
    UnknownKind { kind: u32 },
}

fn read<T: Copy>(bytes: &[u8]) -> Result<T, DecodeError> {
    let need = std::mem::size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::Short {
            len: bytes.len(),
            need,
        });
    }
    // SAFETY: the length is checked above; T is a plain repr(C) record valid for any bit pattern.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A record the kernel sends without its unused tail (at least `min` bytes): the tail reads as
/// zeros.
fn read_trimmed<T: Copy>(bytes: &[u8], min: usize) -> Result<T, DecodeError> {
    let size = std::mem::size_of::<T>();
    if bytes.len() >= size {
        return read(bytes);
    }
    if bytes.len() < min {
        return Err(DecodeError::Short {
            len: bytes.len(),
            need: min,
        });
    }
    let mut value = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: fewer than size_of::<T>() bytes are copied into the zeroed value; T is a plain
    // repr(C) record valid for any bit pattern (as in `read`).
    Ok(unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), value.as_mut_ptr().cast::<u8>(), bytes.len());
        value.assume_init()
    })
}

impl Event {
    /// The process a probe's record is of, to leave out those of processes not traced; None for
    /// records kept whatever their process (samples and waits follow the targets' children; an
    /// exec is looked up by the session).
    pub fn target_pid(&self) -> Option<u32> {
        match self {
            Event::Span(span) => Some(span.header.pid),
            Event::SpanStr(event) => Some(event.span.header.pid),
            Event::Args(args) => Some(args.header.pid),
            Event::LongStr(event) => Some(event.header.pid),
            Event::Out(out) => Some(out.header.pid),
            Event::Usdt(event) => Some(event.header.pid),
            Event::UsdtStr(event) => Some(event.event.header.pid),
            Event::Thread(thread) => Some(thread.header.pid),
            Event::Gpu(event) => Some(event.header.pid),
            Event::CallStack(event) => Some(event.header.pid),
            Event::Sample(..) | Event::OffCpu(..) | Event::Exec(_) | Event::PyStack(_) => None,
        }
    }

    /// Whether what the record reports began before the capture's window began at `start` (ns).
    pub fn before(&self, start: u64) -> bool {
        self.began_ns().is_some_and(|began| began < start)
    }

    /// Whether what the record reports began after the capture stopped at `stop` (ns).
    pub fn after(&self, stop: u64) -> bool {
        match self {
            // Decided by the USDT family: an end may close what began before the stop.
            Event::Usdt(_) | Event::UsdtStr(_) => false,
            _ => self.began_ns().is_some_and(|began| began > stop),
        }
    }

    /// When what the record reports began, for the capture's window ([`Event::before`],
    /// [`Event::after`]); None for records no window leaves out, and for device records, which
    /// `gpu::GpuDevice` decides by the device time they hold.
    fn began_ns(&self) -> Option<u64> {
        match self {
            Event::Span(span) => Some(span.start_ns),
            Event::SpanStr(event) => Some(event.span.start_ns),
            Event::Args(args) => Some(args.start_ns),
            Event::LongStr(event) => Some(event.start_ns),
            Event::Usdt(event) => Some(event.header.ts_ns),
            Event::UsdtStr(event) => Some(event.event.header.ts_ns),
            Event::Sample(sample, _) => Some(sample.header.ts_ns),
            Event::OffCpu(event, _) => Some(event.interval.start_ns),
            Event::PyStack(walk) => Some(walk.header.ts_ns),
            Event::CallStack(event) => Some(match event.start_ns {
                xtrace_common::stacks::CALL_NOT_OPEN => event.header.ts_ns,
                start => start,
            }),
            Event::Thread(_) | Event::Out(_) | Event::Exec(_) | Event::Gpu(_) => None,
        }
    }
}

pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    let header: EventHeader = read(bytes)?;
    match header.kind {
        KIND_SPAN => Ok(Event::Span(read(bytes)?)),
        KIND_SPAN_STR => Ok(Event::SpanStr(Box::new(read(bytes)?))),
        KIND_THREAD => Ok(Event::Thread(read(bytes)?)),
        KIND_EXEC => Ok(Event::Exec(read(bytes)?)),
        KIND_ARGS => Ok(Event::Args(Box::new(read(bytes)?))),
        KIND_USDT => Ok(Event::Usdt(read(bytes)?)),
        KIND_USDT_STR => Ok(Event::UsdtStr(Box::new(read_trimmed(bytes, USDT_STRINGS_AT)?))),
        KIND_SAMPLE => {
            let event: SampleEvent = read(bytes)?;
            let fixed = std::mem::size_of::<SampleEvent>();
            let need = fixed + event.stack_len as usize;
            let stack = bytes.get(fixed..need).ok_or(DecodeError::Short {
                len: bytes.len(),
                need,
            })?;
            Ok(Event::Sample(Box::new(event), stack.to_vec()))
        }
        xtrace_common::offcpu::KIND_OFF_CPU => {
            use xtrace_common::offcpu::OffCpuEvent;
            let event: OffCpuEvent = read(bytes)?;
            let fixed = std::mem::size_of::<OffCpuEvent>();
            let need = fixed + event.sample.stack_len as usize;
            let stack = bytes.get(fixed..need).ok_or(DecodeError::Short {
                len: bytes.len(),
                need,
            })?;
            Ok(Event::OffCpu(Box::new(event), stack.to_vec()))
        }
        KIND_OUT => Ok(Event::Out(read(bytes)?)),
        KIND_PY_STACK => Ok(Event::PyStack(Box::new(read_trimmed(
            bytes,
            xtrace_common::python::PY_STACK_HEAD,
        )?))),
        KIND_LONG_STR => Ok(Event::LongStr(Box::new(read_trimmed(bytes, LONG_STR_AT)?))),
        xtrace_common::gpu::KIND_GPU => Ok(Event::Gpu(Box::new(read(bytes)?))),
        xtrace_common::stacks::KIND_CALL_STACK => Ok(Event::CallStack(Box::new(read(bytes)?))),
        kind => Err(DecodeError::UnknownKind { kind }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xtrace_common::event::ARG_STR_LEN;

    fn span_bytes(span: &SpanEvent) -> Vec<u8> {
        // SAFETY: SpanEvent is repr(C) without padding.
        unsafe {
            std::slice::from_raw_parts(
                (span as *const SpanEvent).cast::<u8>(),
                std::mem::size_of::<SpanEvent>(),
            )
        }
        .to_vec()
    }

    #[test]
    fn decodes_spans_at_any_alignment() {
        let span = SpanEvent {
            header: EventHeader {
                kind: KIND_SPAN,
                cpu: 1,
                pid: 100,
                tid: 101,
                ts_ns: 5_000,
            },
            start_ns: 4_000,
            probe_id: 3,
            depth: 2,
            exit: 1,
            ret: u64::MAX,
        };
        let mut bytes = vec![0u8];
        bytes.extend(span_bytes(&span));
        assert_eq!(decode(&bytes[1..]), Ok(Event::Span(span)));
    }

    #[test]
    fn decodes_spans_with_their_returned_string() {
        let mut string = [0u8; ARG_STR_LEN];
        string[..6].copy_from_slice(b"alpha\0");
        let span = SpanEvent {
            header: EventHeader {
                kind: KIND_SPAN_STR,
                tid: 9,
                ..Default::default()
            },
            start_ns: 10,
            ..Default::default()
        };
        let mut bytes = span_bytes(&span);
        bytes.extend(6u32.to_ne_bytes());
        bytes.extend(0u32.to_ne_bytes());
        bytes.extend(string);
        let expected = SpanStrEvent {
            span,
            str_len: 6,
            _pad: 0,
            string,
        };
        assert_eq!(decode(&bytes), Ok(Event::SpanStr(Box::new(expected))));
        assert_eq!(
            decode(&bytes[..119]),
            Err(DecodeError::Short { len: 119, need: 120 })
        );
    }

    #[test]
    fn decodes_threads() {
        let mut comm = [0u8; 16];
        comm[..6].copy_from_slice(b"worker");
        let thread = ThreadEvent {
            header: EventHeader {
                kind: KIND_THREAD,
                pid: 7,
                tid: 8,
                ..Default::default()
            },
            comm,
        };
        // SAFETY: ThreadEvent is repr(C) without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&thread as *const ThreadEvent).cast::<u8>(),
                std::mem::size_of::<ThreadEvent>(),
            )
        };
        assert_eq!(decode(bytes), Ok(Event::Thread(thread)));
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        let span = SpanEvent {
            header: EventHeader {
                kind: KIND_SPAN,
                ..Default::default()
            },
            ..Default::default()
        };
        let bytes = span_bytes(&span);
        assert_eq!(
            decode(&bytes[..47]),
            Err(DecodeError::Short { len: 47, need: 48 })
        );
        assert_eq!(
            decode(&bytes[..10]),
            Err(DecodeError::Short { len: 10, need: 24 })
        );
        let mut unknown = bytes.clone();
        unknown[0] = 99;
        assert_eq!(decode(&unknown), Err(DecodeError::UnknownKind { kind: 99 }));
    }

    #[test]
    fn string_hits_arrive_without_their_unused_tail() {
        let mut bytes = vec![0u8; USDT_STRINGS_AT + ARG_STR_LEN];
        bytes[..4].copy_from_slice(&KIND_USDT_STR.to_ne_bytes());
        bytes[USDT_STRINGS_AT..USDT_STRINGS_AT + 3].copy_from_slice(b"hi\0");
        let Ok(Event::UsdtStr(event)) = decode(&bytes) else {
            panic!("a trimmed string hit decodes");
        };
        assert_eq!(&event.strings[0][..3], b"hi\0");
        assert!(event.strings[1..].iter().all(|s| s.iter().all(|&b| b == 0)));
        assert_eq!(
            decode(&bytes[..USDT_STRINGS_AT - 8]),
            Err(DecodeError::Short {
                len: USDT_STRINGS_AT - 8,
                need: USDT_STRINGS_AT
            })
        );
    }
}

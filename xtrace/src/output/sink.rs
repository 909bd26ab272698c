//! The trace file's writer: buffered, plain or gzip-compressed (`--gzip`), counting the bytes it
//! hands to the file for the live status line.
use std::{
    fs::File,
    io::{BufWriter, Write},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

/// Counts bytes passing through to `W`.
pub struct Counted<W> {
    inner: W,
    bytes: Arc<AtomicU64>,
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The buffer in front of an output file; trace.json's writer hands over pieces this large.
pub const FILE_BUFFER: usize = 1 << 20;

/// The trace file as it is streamed: plain, or compressed on the way (trace.json.gz). What goes
/// into the file's buffer is counted, after compression.
pub enum Sink {
    Plain(Counted<BufWriter<File>>),
    Gzip(Box<flate2::write::GzEncoder<Counted<BufWriter<File>>>>),
}

impl Sink {
    /// Buffers writes to `file`, compressing them when `gzip`; returns the count of bytes given
    /// to the file so far, which can be read while it is written.
    pub fn new(file: File, gzip: bool) -> (Sink, Arc<AtomicU64>) {
        let bytes = Arc::new(AtomicU64::new(0));
        let file = Counted {
            inner: BufWriter::with_capacity(FILE_BUFFER, file),
            bytes: bytes.clone(),
        };
        let sink = if gzip {
            // Fast compression: the writer thread must keep up with the ring buffer.
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            Sink::Gzip(Box::new(gz))
        } else {
            Sink::Plain(file)
        };
        (sink, bytes)
    }

    /// Writes what is buffered and, compressed, the gzip trailer.
    pub fn close(self) -> std::io::Result<()> {
        match self {
            Sink::Plain(mut file) => file.flush(),
            Sink::Gzip(gz) => (*gz).finish()?.flush(),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(w) => w.write(buf),
            Sink::Gzip(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(w) => w.flush(),
            Sink::Gzip(w) => w.flush(),
        }
    }
}

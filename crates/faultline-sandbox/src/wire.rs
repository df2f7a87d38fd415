//! The wire format between a [`Session`](crate::Session) and its supervisor: frames of a 32-bit
//! length followed by little-endian integers and length-prefixed UTF-8 strings.
//!
//! Both ends are built from this crate, so the only handshake is a greeting naming the format;
//! a frame that does not parse means the peer is broken, and the session ends.

use crate::capture::CapturedText;
use std::io::{self, Read, Write};
use std::time::Duration;

/// The first frame a supervisor sends, once it has made itself safe to talk to.
pub(crate) const GREETING: &[u8] = b"faultline-supervisor/1";

/// No frame is larger than this: two capped streams stay far below it, and a garbage length
/// must not make the reader allocate gigabytes.
const MAX_FRAME: usize = 256 << 20;

/// One command for the supervisor to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// Echoed in the reply, so a reply can never be taken for another command's.
    pub id: u64,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    /// `None` waits forever.
    pub timeout: Option<Duration>,
    pub cap: usize,
}

/// What the supervisor saw the command do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    pub id: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub stdout: CapturedText,
    pub stderr: CapturedText,
}

#[derive(Default)]
struct Encoder(Vec<u8>);

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn opt_i32(&mut self, v: Option<i32>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u32(v as u32);
            }
            None => self.u8(0),
        }
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
    fn captured(&mut self, c: &CapturedText) {
        self.str(&c.text);
        self.u64(c.total_chars);
        self.u64(c.total_bytes);
        self.u64(c.elided_chars);
        self.u8(c.lossy as u8);
    }
}

struct Decoder<'a>(&'a [u8]);

fn malformed(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed frame: {what}"),
    )
}

impl Decoder<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(malformed("too short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn bool(&mut self) -> io::Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(malformed("bad flag")),
        }
    }
    fn opt_i32(&mut self) -> io::Result<Option<i32>> {
        Ok(if self.bool()? {
            Some(self.u32()? as i32)
        } else {
            None
        })
    }
    fn str(&mut self) -> io::Result<String> {
        let len = usize::try_from(self.u64()?).map_err(|_| malformed("length"))?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| malformed("string is not UTF-8"))
    }
    fn count(&mut self) -> io::Result<usize> {
        let n = self.u32()? as usize;
        // Every counted item takes at least 8 bytes, so a count larger than that is garbage.
        if n > self.0.len() / 8 {
            return Err(malformed("count"));
        }
        Ok(n)
    }
    fn captured(&mut self) -> io::Result<CapturedText> {
        Ok(CapturedText {
            text: self.str()?,
            total_chars: self.u64()?,
            total_bytes: self.u64()?,
            elided_chars: self.u64()?,
            lossy: self.bool()?,
        })
    }
    fn end(self) -> io::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(malformed("trailing bytes"))
        }
    }
}

impl Request {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.u64(self.id);
        e.u32(self.argv.len() as u32);
        for a in &self.argv {
            e.str(a);
        }
        e.u32(self.env.len() as u32);
        for (k, v) in &self.env {
            e.str(k);
            e.str(v);
        }
        match &self.workdir {
            Some(w) => {
                e.u8(1);
                e.str(w);
            }
            None => e.u8(0),
        }
        // Milliseconds, saturating: `u64::MAX` stands for no timeout.
        e.u64(
            self.timeout
                .map_or(u64::MAX, |t| t.as_millis().min(u64::MAX as u128 - 1) as u64),
        );
        e.u64(self.cap as u64);
        e.0
    }

    pub(crate) fn decode(frame: &[u8]) -> io::Result<Request> {
        let mut d = Decoder(frame);
        let id = d.u64()?;
        let argv = (0..d.count()?)
            .map(|_| d.str())
            .collect::<io::Result<Vec<_>>>()?;
        let env = (0..d.count()?)
            .map(|_| Ok((d.str()?, d.str()?)))
            .collect::<io::Result<Vec<_>>>()?;
        let workdir = if d.bool()? { Some(d.str()?) } else { None };
        let timeout = match d.u64()? {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms)),
        };
        let cap = usize::try_from(d.u64()?).map_err(|_| malformed("cap"))?;
        d.end()?;
        Ok(Request {
            id,
            argv,
            env,
            workdir,
            timeout,
            cap,
        })
    }
}

impl Reply {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        e.u64(self.id);
        e.opt_i32(self.exit_code);
        e.opt_i32(self.signal);
        e.u8(self.timed_out as u8);
        e.captured(&self.stdout);
        e.captured(&self.stderr);
        e.0
    }

    pub(crate) fn decode(frame: &[u8]) -> io::Result<Reply> {
        let mut d = Decoder(frame);
        let reply = Reply {
            id: d.u64()?,
            exit_code: d.opt_i32()?,
            signal: d.opt_i32()?,
            timed_out: d.bool()?,
            stdout: d.captured()?,
            stderr: d.captured()?,
        };
        d.end()?;
        Ok(reply)
    }
}

/// The 4-byte length header of a frame, checked against [`MAX_FRAME`].
pub(crate) fn frame_len(header: [u8; 4]) -> io::Result<usize> {
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_FRAME {
        return Err(malformed("frame too large"));
    }
    Ok(len)
}

/// Prefixes a payload with its length.
pub(crate) fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 4);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads one frame; `None` at a clean end of stream (the peer closed between frames).
pub(crate) fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let mut payload = vec![0u8; frame_len(header)?];
    r.read_exact(&mut payload)?;
    Ok(Some(payload))
}

/// Writes one frame and flushes it.
pub(crate) fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    w.write_all(&frame(payload))?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> CapturedText {
        CapturedText {
            text: s.into(),
            total_chars: s.chars().count() as u64,
            total_bytes: s.len() as u64,
            elided_chars: 0,
            lossy: false,
        }
    }

    #[test]
    fn requests_round_trip() {
        let req = Request {
            id: 7,
            argv: vec!["/bin/bash".into(), "-c".into(), "echo é".into()],
            env: vec![("A".into(), "b c".into())],
            workdir: Some("/workspace".into()),
            timeout: Some(Duration::from_millis(1500)),
            cap: 10_000,
        };
        assert_eq!(Request::decode(&req.encode()).unwrap(), req);
        let forever = Request {
            timeout: None,
            workdir: None,
            ..req
        };
        assert_eq!(Request::decode(&forever.encode()).unwrap(), forever);
    }

    #[test]
    fn replies_round_trip() {
        let reply = Reply {
            id: 3,
            exit_code: None,
            signal: Some(9),
            timed_out: true,
            stdout: text("out\n"),
            stderr: CapturedText {
                lossy: true,
                elided_chars: 5,
                ..text("\u{fffd}")
            },
        };
        assert_eq!(Reply::decode(&reply.encode()).unwrap(), reply);
    }

    #[test]
    fn truncated_and_padded_frames_are_rejected() {
        let bytes = Reply {
            id: 1,
            exit_code: Some(-1),
            signal: None,
            timed_out: false,
            stdout: text("a"),
            stderr: text(""),
        }
        .encode();
        assert!(Reply::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(Reply::decode(&padded).is_err());
        assert!(Request::decode(&bytes).is_err());
    }

    #[test]
    fn frames_survive_a_byte_at_a_time_reader() {
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.1 == self.0.len() || buf.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0[self.1];
                self.1 += 1;
                Ok(1)
            }
        }
        let mut wire = frame(b"hello");
        wire.extend(frame(b""));
        let mut r = Trickle(wire, 0);
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"hello");
        assert_eq!(read_frame(&mut r).unwrap().unwrap(), b"");
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        assert!(frame_len(u32::MAX.to_le_bytes()).is_err());
    }
}

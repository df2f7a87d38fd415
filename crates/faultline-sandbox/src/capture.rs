//! Bounded capture of a command's output: the head and the tail are kept, the middle is counted.
//!
//! Memory stays bounded whatever the command prints (a 100 MB dump costs the same as a 20 KB
//! one), and the rendering tells the reader how much was left out, as mini-swe-agent does.

use std::collections::VecDeque;

/// Accumulates a byte stream, keeping at most `head_bytes` from the start and `tail_bytes` from
/// the end.
#[derive(Debug)]
pub struct CappedBuffer {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_bytes: usize,
    tail_bytes: usize,
    total_bytes: u64,
    total_chars: u64,
}

/// What a command printed on one stream, after capping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedText {
    /// The text shown to a reader: everything, or head + an elision line + tail.
    pub text: String,
    /// Characters the command printed in all (UTF-8 scalar values; invalid bytes count as one).
    pub total_chars: u64,
    /// Bytes the command printed in all.
    pub total_bytes: u64,
    /// Characters left out of `text`.
    pub elided_chars: u64,
    /// Whether the stream held bytes that are not valid UTF-8 (shown as U+FFFD).
    pub lossy: bool,
}

impl CappedBuffer {
    /// A buffer that can render up to `max_chars` characters: half from the head, half from the
    /// tail. Four bytes are kept per character so multi-byte text is never cut short.
    pub fn new(max_chars: usize) -> Self {
        let half_chars = max_chars.div_ceil(2);
        CappedBuffer {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_bytes: half_chars * 4,
            tail_bytes: half_chars * 4,
            total_bytes: 0,
            total_chars: 0,
        }
    }

    /// Adds bytes from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        self.total_chars += bytes.iter().filter(|b| (**b & 0xC0) != 0x80).count() as u64;
        if self.head.len() < self.head_bytes {
            let take = (self.head_bytes - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
        }
        // The tail sees every byte, so a stream just over the cap still renders its end.
        if bytes.len() >= self.tail_bytes {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_bytes..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_bytes);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Renders at most `max_chars` characters of the stream, with a line counting what was
    /// left out.
    pub fn finish(self, max_chars: usize) -> CapturedText {
        let lossy_check = |b: &[u8]| std::str::from_utf8(b).is_err();
        let total_bytes = self.total_bytes;
        let total_chars = self.total_chars;
        if total_bytes as usize <= self.head.len() {
            let lossy = lossy_check(&self.head);
            let text = String::from_utf8_lossy(&self.head).into_owned();
            if text.chars().count() <= max_chars {
                return CapturedText {
                    text,
                    total_chars,
                    total_bytes,
                    elided_chars: 0,
                    lossy,
                };
            }
        }
        let tail: Vec<u8> = self.tail.into_iter().collect();
        let head_text = String::from_utf8_lossy(&self.head);
        let tail_text = String::from_utf8_lossy(&tail);
        let lossy = lossy_check(&self.head) || lossy_check(&tail);
        let half = max_chars / 2;
        let head_part: String = head_text.chars().take(half).collect();
        let tail_chars: Vec<char> = tail_text.chars().collect();
        let tail_part: String = tail_chars[tail_chars.len().saturating_sub(max_chars - half)..]
            .iter()
            .collect();
        let shown = (head_part.chars().count() + tail_part.chars().count()) as u64;
        let elided = total_chars.saturating_sub(shown);
        if elided == 0 {
            return CapturedText {
                text: format!("{head_part}{tail_part}"),
                total_chars,
                total_bytes,
                elided_chars: 0,
                lossy,
            };
        }
        CapturedText {
            text: format!(
                "{head_part}\n[... {elided} characters elided; {total_chars} in all ...]\n{tail_part}"
            ),
            total_chars,
            total_bytes,
            elided_chars: elided,
            lossy,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(chunks: &[&[u8]], max: usize) -> CapturedText {
        let mut buf = CappedBuffer::new(max);
        for c in chunks {
            buf.push(c);
        }
        buf.finish(max)
    }

    #[test]
    fn short_output_is_kept_whole() {
        let out = capture(&[b"hello ", b"world\n"], 100);
        assert_eq!(out.text, "hello world\n");
        assert_eq!(out.elided_chars, 0);
        assert_eq!(out.total_chars, 12);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_counts_the_middle() {
        let body: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = capture(&[body.as_bytes()], 100);
        assert!(out.text.starts_with("line 0\n"), "{}", out.text);
        assert!(out.text.ends_with("line 999\n"), "{}", out.text);
        assert!(out.text.contains("characters elided"));
        assert_eq!(out.elided_chars, body.len() as u64 - 100);
        assert!(out.text.len() < 200);
    }

    #[test]
    fn many_small_pushes_match_one_big_push() {
        let body: Vec<u8> = (0..50_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let whole = capture(&[&body], 64);
        let pieces: Vec<&[u8]> = body.chunks(7).collect();
        let split = capture(&pieces, 64);
        assert_eq!(whole, split);
    }

    #[test]
    fn multibyte_text_is_counted_in_characters() {
        let body = "é".repeat(300);
        let out = capture(&[body.as_bytes()], 100);
        assert_eq!(out.total_chars, 300);
        assert_eq!(out.elided_chars, 200);
        assert!(!out.lossy);
    }

    #[test]
    fn output_just_over_the_cap_shows_its_end() {
        let body: String = (0..30).map(|i| format!("{i:02}\n")).collect();
        let out = capture(&[body.as_bytes()], 60);
        assert!(out.text.ends_with("29\n"), "{}", out.text);
        assert_eq!(out.elided_chars, 30);
    }

    #[test]
    fn binary_output_is_rendered_lossily_and_flagged() {
        let out = capture(&[&[0xff, 0xfe, 0x00, b'a']], 100);
        assert!(out.lossy);
        assert!(out.text.contains('\u{fffd}'));
    }
}

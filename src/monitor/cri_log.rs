//! The CRI log format: splitting a container's byte stream into `P`/`F` records like containerd.
//!
//! Rules, matched to containerd's `internal/cri/io/logger.go` (`redirectLogs`):
//! - a complete line is one `F` record without its `\n`; a `\r\n` ending loses both bytes;
//! - a line is buffered until its newline, however many reads it takes;
//! - a line longer than `max` bytes is cut into `P` records of exactly `max` bytes, the rest
//!   being the `F` record (a line of exactly `max` bytes is a single `F`); a trailing `\r` that
//!   may still become `\r\n` is not counted until the next byte arrives;
//! - an empty line is an `F` record with empty content;
//! - bytes still pending at end of stream are flushed as `P` (containerd: "it should be treated
//!   as a partial line"), a trailing `\r` included.

use std::io::Write;
use std::time::SystemTime;

use super::timestamp::push_rfc3339_nano;

/// Which container stream a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The container's stdout (also the single stream of a terminal).
    Stdout,
    /// The container's stderr.
    Stderr,
}

impl Stream {
    /// The stream's name in a CRI log record.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// `P` (partial: more of this line follows) or `F` (full: the line, or its last piece).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    /// `P`
    Partial,
    /// `F`
    Full,
}

impl Tag {
    fn letter(self) -> char {
        match self {
            Tag::Partial => 'P',
            Tag::Full => 'F',
        }
    }
}

/// Where records go: the log file, or a vector in tests.
pub trait Sink {
    /// Takes one record; `content` has no trailing newline.
    fn record(&mut self, stream: Stream, tag: Tag, content: &[u8]);
}

/// Appends one record: `<RFC3339Nano> <stream> <P|F> <content>\n`.
pub fn format_record(out: &mut Vec<u8>, at: SystemTime, stream: Stream, tag: Tag, content: &[u8]) {
    push_rfc3339_nano(out, at);
    // Writing into a Vec cannot fail.
    let _ = write!(out, " {} {} ", stream.name(), tag.letter());
    out.extend_from_slice(content);
    out.push(b'\n');
}

/// Cuts one stream into records; holds at most one unfinished line (≤ `max` + 1 bytes kept
/// between reads).
#[derive(Debug)]
pub struct LineSplitter {
    stream: Stream,
    max: usize,
    pending: Vec<u8>,
}

impl LineSplitter {
    /// A splitter for `stream` with lines cut at `max` bytes (0: never cut).
    pub fn new(stream: Stream, max: usize) -> Self {
        LineSplitter {
            stream,
            max,
            pending: Vec::new(),
        }
    }

    /// Consumes the next bytes read from the stream.
    pub fn feed(&mut self, mut data: &[u8], sink: &mut impl Sink) {
        while let Some(nl) = data.iter().position(|&b| b == b'\n') {
            if self.pending.is_empty() {
                self.emit_line(strip_cr(&data[..nl]), sink);
            } else {
                let mut line = std::mem::take(&mut self.pending);
                line.extend_from_slice(&data[..nl]);
                self.emit_line(strip_cr(&line), sink);
                line.clear();
                self.pending = line; // keep the allocation
            }
            data = &data[nl + 1..];
        }
        self.pending.extend_from_slice(data);
        self.cut_pending(sink);
    }

    /// The stream ended (or the drain time ran out): what is pending goes out as `P`.
    pub fn finish(&mut self, sink: &mut impl Sink) {
        if self.pending.is_empty() {
            return;
        }
        let piece = if self.max == 0 {
            self.pending.len()
        } else {
            self.max
        };
        for chunk in self.pending.chunks(piece) {
            sink.record(self.stream, Tag::Partial, chunk);
        }
        self.pending = Vec::new();
    }

    /// One complete line (newline already stripped): `P` pieces of `max`, then the `F` rest.
    fn emit_line(&self, mut line: &[u8], sink: &mut impl Sink) {
        if self.max > 0 {
            while line.len() > self.max {
                sink.record(self.stream, Tag::Partial, &line[..self.max]);
                line = &line[self.max..];
            }
        }
        sink.record(self.stream, Tag::Full, line);
    }

    /// An unfinished line longer than `max` loses its leading `max`-byte pieces as `P` records.
    fn cut_pending(&mut self, sink: &mut impl Sink) {
        if self.max == 0 {
            return;
        }
        // containerd never counts a last `\r` before it knows whether `\n` follows.
        let counted = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
        let mut start = 0;
        while counted - start > self.max {
            sink.record(
                self.stream,
                Tag::Partial,
                &self.pending[start..start + self.max],
            );
            start += self.max;
        }
        if start > 0 {
            self.pending.drain(..start);
        }
    }
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[derive(Default)]
    struct Records(Vec<(Stream, Tag, Vec<u8>)>);

    impl Sink for Records {
        fn record(&mut self, stream: Stream, tag: Tag, content: &[u8]) {
            self.0.push((stream, tag, content.to_vec()));
        }
    }

    fn split(max: usize, reads: &[&[u8]]) -> Vec<(Tag, Vec<u8>)> {
        let mut s = LineSplitter::new(Stream::Stdout, max);
        let mut r = Records::default();
        for data in reads {
            s.feed(data, &mut r);
        }
        s.finish(&mut r);
        r.0.into_iter().map(|(_, t, c)| (t, c)).collect()
    }

    fn f(s: &str) -> (Tag, Vec<u8>) {
        (Tag::Full, s.as_bytes().to_vec())
    }

    fn p(s: &str) -> (Tag, Vec<u8>) {
        (Tag::Partial, s.as_bytes().to_vec())
    }

    #[test]
    fn record_bytes_are_exact() {
        let mut out = Vec::new();
        let at = UNIX_EPOCH + Duration::new(1_795_321_301, 123_456_789);
        format_record(&mut out, at, Stream::Stderr, Tag::Partial, b"half a line");
        format_record(&mut out, at, Stream::Stdout, Tag::Full, b"");
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            "2026-11-22T04:21:41.123456789Z stderr P half a line\n\
             2026-11-22T04:21:41.123456789Z stdout F \n"
        );
    }

    #[test]
    fn complete_lines_are_full_records_without_newline() {
        assert_eq!(split(16, &[b"out\nerr\n"]), vec![f("out"), f("err")]);
    }

    #[test]
    fn crlf_loses_both_bytes_and_a_lone_cr_stays() {
        assert_eq!(
            split(16, &[b"a\r\nb\rc\n\r\n"]),
            vec![f("a"), f("b\rc"), f("")]
        );
    }

    #[test]
    fn crlf_split_across_reads_is_still_stripped() {
        assert_eq!(split(16, &[b"abc\r", b"\nd\n"]), vec![f("abc"), f("d")]);
    }

    #[test]
    fn a_line_arriving_in_many_reads_is_one_record() {
        assert_eq!(
            split(16, &[b"he", b"ll", b"o\nwor", b"ld\n"]),
            vec![f("hello"), f("world")]
        );
    }

    #[test]
    fn long_lines_are_cut_into_partial_pieces_of_max() {
        assert_eq!(
            split(4, &[b"abcdefghij\n"]),
            vec![p("abcd"), p("efgh"), f("ij")]
        );
    }

    #[test]
    fn a_line_of_exactly_max_is_one_full_record() {
        assert_eq!(split(4, &[b"abcd\n"]), vec![f("abcd")]);
        assert_eq!(split(4, &[b"abcdefgh\n"]), vec![p("abcd"), f("efgh")]);
        // pending reaches exactly max before the newline: no early cut
        assert_eq!(split(4, &[b"ab", b"cd", b"\n"]), vec![f("abcd")]);
    }

    #[test]
    fn long_lines_across_reads_are_cut_at_the_same_offsets() {
        let reads: [&[u8]; 4] = [b"abc", b"defgh", b"ijklm", b"n\n"];
        assert_eq!(
            split(4, &reads),
            vec![p("abcd"), p("efgh"), p("ijkl"), f("mn")]
        );
    }

    #[test]
    fn a_cr_at_the_cut_point_waits_for_the_next_byte() {
        // containerd never counts a last "\r": "abcd\r\n" is "abcd", full.
        assert_eq!(split(4, &[b"abcd\r", b"\n"]), vec![f("abcd")]);
        // … but once another byte follows, the "\r" is content
        assert_eq!(split(4, &[b"abcd\r", b"x\n"]), vec![p("abcd"), f("\rx")]);
    }

    #[test]
    fn pending_bytes_at_end_of_stream_are_partial() {
        assert_eq!(
            split(16, &[b"done\nno newline"]),
            vec![f("done"), p("no newline")]
        );
        assert_eq!(split(4, &[b"abcd\r"]), vec![p("abcd"), p("\r")]);
        assert_eq!(split(16, &[b""]), vec![]);
    }

    #[test]
    fn max_zero_never_cuts() {
        assert_eq!(
            split(0, &[b"abcdefghij\n", b"klm"]),
            vec![f("abcdefghij"), p("klm")]
        );
    }

    #[test]
    fn forty_thousand_bytes_make_two_partials_and_a_full() {
        let mut line = vec![b'x'; 40_000];
        line.push(b'\n');
        let chunks: Vec<&[u8]> = line.chunks(4096).collect();
        let sizes: Vec<(Tag, usize)> = split(16_384, &chunks)
            .into_iter()
            .map(|(t, c)| (t, c.len()))
            .collect();
        assert_eq!(
            sizes,
            vec![
                (Tag::Partial, 16_384),
                (Tag::Partial, 16_384),
                (Tag::Full, 7_232)
            ]
        );
    }

    #[test]
    fn each_splitter_tags_its_own_stream() {
        let mut out = LineSplitter::new(Stream::Stdout, 16);
        let mut err = LineSplitter::new(Stream::Stderr, 16);
        let mut r = Records::default();
        out.feed(b"o1\no", &mut r);
        err.feed(b"e1\n", &mut r);
        out.feed(b"2\n", &mut r);
        let got: Vec<(Stream, Vec<u8>)> = r.0.into_iter().map(|(s, _, c)| (s, c)).collect();
        assert_eq!(
            got,
            vec![
                (Stream::Stdout, b"o1".to_vec()),
                (Stream::Stderr, b"e1".to_vec()),
                (Stream::Stdout, b"o2".to_vec()),
            ]
        );
    }
}

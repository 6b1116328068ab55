//! Files of lines appended as things happen (the event log, a DAG job's journal), and read
//! back by another process, maybe after the writer was killed in the middle of a line.
//!
//! The rules, in one place: a line is written with one `write` on a file opened for
//! appending; a reader ignores a last line with no newline (the writer was killed while
//! writing it); and a writer that opens such a file first cuts that torn tail, so that its own
//! first line does not end up glued to it, a bad line in the middle forever.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Opens `path` for appending (creating it), after cutting a torn last line.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    let mut file = File::options()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        let keep = complete_len(&mut file, len)?;
        if keep < len {
            file.set_len(keep)?;
        }
    }
    Ok(file)
}

/// The length of the file's complete lines: up to and with its last newline.
fn complete_len(file: &mut File, len: u64) -> std::io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buffer = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let size = usize::try_from(end - start).unwrap_or(buffer.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buffer[..size])?;
        if let Some(at) = buffer[..size].iter().rposition(|b| *b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// The complete lines of `path` with their numbers (from 1), empty ones left out; a torn last
/// line is ignored. Bytes, not text: a line cut inside a character is the reader's to refuse
/// only if it is not the torn last one.
pub fn read_lines(path: &Path) -> std::io::Result<Vec<(usize, Vec<u8>)>> {
    let bytes = std::fs::read(path)?;
    let mut lines: Vec<(usize, Vec<u8>)> = bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.to_vec()))
        .collect();
    // `split` yields an empty piece after a final newline, and the torn tail otherwise.
    lines.pop();
    lines.retain(|(_, line)| !line.is_empty());
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_torn_tail_is_ignored_by_readers_and_cut_by_the_next_writer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        std::fs::write(&path, "one\n\ntwo\nthr\u{e9}".as_bytes()).expect("write");
        // Cut inside the two bytes of `é`.
        let bytes = std::fs::read(&path).expect("read");
        std::fs::write(&path, &bytes[..bytes.len() - 1]).expect("write");
        let lines = read_lines(&path).expect("reads");
        assert_eq!(lines, vec![(1, b"one".to_vec()), (3, b"two".to_vec())]);

        let mut file = open_append(&path).expect("opens");
        file.write_all(b"four\n").expect("appends");
        let lines = read_lines(&path).expect("reads");
        assert_eq!(
            lines,
            vec![
                (1, b"one".to_vec()),
                (3, b"two".to_vec()),
                (4, b"four".to_vec())
            ]
        );

        let empty = dir.path().join("empty");
        drop(open_append(&empty).expect("creates"));
        assert!(read_lines(&empty).expect("reads").is_empty());
    }
}

//! Shared helpers of the `accumulate_*` tests: the recorded corpus and a minimal SSE splitter
//! (independent of the crate's framer on purpose).

#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// `$RAPIDSSE_CORPUS`, else `tests/corpus` in the repository.
pub fn corpus_dir(kind: &str) -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("RAPIDSSE_CORPUS").map(PathBuf::from),
        Some(manifest.join("tests/corpus")),
    ];
    for dir in candidates.into_iter().flatten() {
        if dir.join(kind).is_dir() {
            return dir.join(kind);
        }
    }
    panic!("corpus directory {kind:?} not found; set RAPIDSSE_CORPUS");
}

/// The corpus files of one kind, sorted, with at least one present.
pub fn corpus_files(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(kind))
        .expect("readable corpus directory")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files for {kind}");
    files
}

pub fn file_name(path: &std::path::Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// The `data` of each SSE event: blocks split on blank lines, `data:` values joined with LF.
pub fn sse_payloads(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path)
        .expect("UTF-8 corpus file")
        .replace("\r\n", "\n");
    let mut payloads = Vec::new();
    for block in text.split("\n\n") {
        let data: Vec<&str> = block
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|value| value.strip_prefix(' ').unwrap_or(value))
            .collect();
        if !data.is_empty() {
            payloads.push(data.join("\n"));
        }
    }
    payloads
}

/// One JSON message per non-empty line.
pub fn jsonl_payloads(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("UTF-8 corpus file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

pub fn json(payload: &str) -> Value {
    serde_json::from_str(payload).expect("corpus payload is JSON")
}

pub fn event_type(payload: &str) -> String {
    json(payload)
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The text-bearing fields of an item, by path: item-level `arguments`, `input`, `code`;
/// `content[i].text|refusal|transcript`; `summary[i].text`.
pub fn item_texts(item: &Value) -> Vec<(String, String)> {
    let mut texts = Vec::new();
    for key in ["arguments", "input", "code"] {
        if let Some(s) = item.get(key).and_then(Value::as_str) {
            texts.push((key.to_owned(), s.to_owned()));
        }
    }
    for array in ["content", "summary"] {
        let Some(parts) = item.get(array).and_then(Value::as_array) else {
            continue;
        };
        for (i, part) in parts.iter().enumerate() {
            for key in ["text", "refusal", "transcript"] {
                if let Some(s) = part.get(key).and_then(Value::as_str) {
                    texts.push((format!("{array}[{i}].{key}"), s.to_owned()));
                }
            }
        }
    }
    texts
}

/// How many of `payloads` have a type outside `used` (the events an accumulator counts in
/// `unknown_events()`).
pub fn unused_events(payloads: &[String], used: &[&str]) -> u64 {
    payloads
        .iter()
        .filter(|p| !used.contains(&event_type(p).as_str()))
        .count() as u64
}

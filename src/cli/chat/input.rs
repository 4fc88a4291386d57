//! Where `chat` reads its lines: on a terminal a line editor (rustyline: a `> ` prompt,
//! editing, history kept in a file), otherwise stdin as it comes (a script or a pipe). The
//! reading blocks, so it happens on a thread of its own, one line per request, and the chat's
//! task awaits each line beside the signals.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::sync::mpsc as std_mpsc;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use tokio::sync::mpsc;

/// The prompt shown on a terminal.
pub const PROMPT: &str = "> ";

/// One read from the input.
#[derive(Debug)]
pub enum Input {
    /// A line (without its end of line).
    Line(String),
    /// A line that was not UTF-8.
    NotUtf8,
    /// Ctrl-C at the prompt (terminal only; in a pipe Ctrl-C is a signal).
    Interrupted,
    /// The end of the input (Ctrl-D on a terminal).
    End,
    /// The input could not be read.
    Failed(std::io::Error),
}

/// The reading thread's handle: ask for a line, await it.
pub struct LineReader {
    ask: std_mpsc::Sender<()>,
    lines: mpsc::UnboundedReceiver<Input>,
}

impl LineReader {
    /// Starts reading stdin: with a line editor when stdin and stdout are terminals (its
    /// history in `history`), plain lines otherwise.
    pub fn start(history: PathBuf) -> std::io::Result<LineReader> {
        let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let (ask, asked) = std_mpsc::channel::<()>();
        let (send, lines) = mpsc::unbounded_channel();
        let editor = if interactive {
            Some(DefaultEditor::new().map_err(std::io::Error::other)?)
        } else {
            None
        };
        std::thread::Builder::new()
            .name("ctxbridge-chat-input".into())
            .spawn(move || match editor {
                Some(editor) => edit_lines(editor, &history, &asked, &send),
                None => plain_lines(&asked, &send),
            })?;
        Ok(LineReader { ask, lines })
    }

    /// The next line; [`Input::End`] once the reading thread is gone.
    pub async fn next(&mut self) -> Input {
        if self.ask.send(()).is_err() {
            return Input::End;
        }
        self.lines.recv().await.unwrap_or(Input::End)
    }
}

/// A terminal: one `readline` per request, each non-empty line added to the history, which is
/// loaded from and saved to `history` (a history that cannot be read or written only loses
/// the recall, never the chat).
fn edit_lines(
    mut editor: DefaultEditor,
    history: &std::path::Path,
    asked: &std_mpsc::Receiver<()>,
    send: &mpsc::UnboundedSender<Input>,
) {
    let _ = editor.load_history(history);
    while asked.recv().is_ok() {
        let input = match editor.readline(PROMPT) {
            Ok(line) => {
                if !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                    let _ = editor.append_history(history);
                }
                Input::Line(line)
            }
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(ReadlineError::Eof) => Input::End,
            Err(ReadlineError::Io(error)) => Input::Failed(error),
            Err(other) => Input::Failed(std::io::Error::other(other)),
        };
        let last = matches!(input, Input::End | Input::Failed(_) | Input::Interrupted);
        if send.send(input).is_err() || last {
            return;
        }
    }
}

/// A pipe or a file: one line per request.
fn plain_lines(asked: &std_mpsc::Receiver<()>, send: &mpsc::UnboundedSender<Input>) {
    let mut stdin = std::io::stdin().lock();
    let mut raw = Vec::new();
    while asked.recv().is_ok() {
        raw.clear();
        let input = match stdin.read_until(b'\n', &mut raw) {
            Ok(0) => Input::End,
            Ok(_) => {
                if raw.last() == Some(&b'\n') {
                    raw.pop();
                }
                match String::from_utf8(std::mem::take(&mut raw)) {
                    Ok(line) => Input::Line(line),
                    Err(_) => Input::NotUtf8,
                }
            }
            Err(error) => Input::Failed(error),
        };
        let last = matches!(input, Input::End | Input::Failed(_));
        if send.send(input).is_err() || last {
            return;
        }
    }
}

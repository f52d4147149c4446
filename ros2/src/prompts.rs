//! `~/prompt` messages and the `prompts` parameter: the CLI's prompt syntax
//! ([`edgetam_pipeline::PromptSpec`], several joined with `|`) plus `remove=ID` and `reset`,
//! each optionally for a frame (`frame=N`: N counts the frames the node has received on
//! `image`, from 0). A message is parsed whole before anything changes: one bad item refuses it.

use std::collections::BTreeMap;

use edgetam_pipeline::PromptSpec;

/// Why a prompt message is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PromptError {
    #[error("empty prompt")]
    Empty,
    #[error("item {index} (`{item}`): {reason}")]
    Item {
        index: usize,
        item: String,
        reason: String,
    },
}

/// What one item asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Prompt(PromptSpec),
    Remove(u32),
    Reset,
}

/// One item and the received frame it applies to (`None`: the next frame received).
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub frame: Option<u64>,
    pub action: Action,
}

/// Largest object id: `~/mask` is 16-bit and 0 is the background.
pub const MAX_OBJECT_ID: u32 = u16::MAX as u32;

/// Parses a `~/prompt` message (see the module docs).
pub fn parse(text: &str) -> Result<Vec<Command>, PromptError> {
    let items: Vec<&str> = text.split('|').map(str::trim).collect();
    if items.iter().all(|i| i.is_empty()) {
        return Err(PromptError::Empty);
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            parse_item(item).map_err(|reason| PromptError::Item {
                index,
                item: item.to_string(),
                reason,
            })
        })
        .collect()
}

fn parse_item(item: &str) -> Result<Command, String> {
    if item.is_empty() {
        return Err("empty item".into());
    }
    let tokens: Vec<(&str, &str)> = item
        .split(';')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (t, ""),
        })
        .collect();
    let frame_of = |v: &str| -> Result<u64, String> {
        v.parse::<u64>()
            .map_err(|_| format!("frame=`{v}`: the frame must be a non-negative integer"))
    };
    let frame = tokens
        .iter()
        .filter(|(k, _)| *k == "frame")
        .map(|(_, v)| frame_of(v))
        .next()
        .transpose()?;
    let id_of = |v: &str| -> Result<u32, String> {
        let id = v
            .parse::<u32>()
            .map_err(|_| format!("`{v}` is not an object id"))?;
        check_id(id)?;
        Ok(id)
    };
    let is = |key: &str| tokens.iter().any(|(k, _)| *k == key);
    if is("reset") || is("remove") {
        let mut action = None;
        for (k, v) in &tokens {
            match *k {
                "frame" => {}
                "reset" if v.is_empty() && action.is_none() => action = Some(Action::Reset),
                "remove" if action.is_none() => action = Some(Action::Remove(id_of(v)?)),
                other => {
                    return Err(format!(
                        "`{other}` cannot go with remove=ID or reset (only frame=N can)"
                    ))
                }
            }
        }
        let action = action.ok_or("expected remove=ID or reset")?;
        return Ok(Command { frame, action });
    }
    let spec = PromptSpec::parse(item).map_err(|e| e.to_string())?;
    check_id(spec.obj)?;
    Ok(Command {
        frame,
        action: Action::Prompt(spec),
    })
}

fn check_id(id: u32) -> Result<(), String> {
    if id == 0 || id > MAX_OBJECT_ID {
        return Err(format!(
            "object id {id} is outside 1..={MAX_OBJECT_ID} (~/mask is 16-bit, 0 the background)"
        ));
    }
    Ok(())
}

/// Commands waiting for their frame, by received-frame index.
#[derive(Debug, Default)]
pub struct Schedule {
    by_frame: BTreeMap<u64, Vec<Action>>,
}

/// Where a command went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// For the next frame received.
    Next,
    /// Waiting for received frame N.
    Later(u64),
    /// Its frame was received already: applied to the next frame instead.
    Late { asked: u64 },
}

impl Schedule {
    /// Places `cmd` given that `received` frames were received so far (the next one is
    /// number `received`).
    pub fn place(&mut self, cmd: Command, received: u64) -> Placed {
        let (frame, placed) = match cmd.frame {
            None => (received, Placed::Next),
            Some(f) if f < received => (received, Placed::Late { asked: f }),
            Some(f) if f == received => (f, Placed::Next),
            Some(f) => (f, Placed::Later(f)),
        };
        self.by_frame.entry(frame).or_default().push(cmd.action);
        placed
    }

    /// The actions for received frame `index` (and any left from before it), in order.
    pub fn take(&mut self, index: u64) -> Vec<Action> {
        let later = self.by_frame.split_off(&(index + 1));
        let due = std::mem::replace(&mut self.by_frame, later);
        due.into_values().flatten().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_frame.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_items() {
        let c = parse("obj=1;box=10,20,50,60 | obj=2;frame=4;point=5,6,1").unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].frame, None);
        let Action::Prompt(s) = &c[0].action else {
            panic!("{c:?}")
        };
        assert_eq!((s.obj, s.bbox), (1, Some([10., 20., 50., 60.])));
        assert_eq!(c[1].frame, Some(4));
        assert!(matches!(&c[1].action, Action::Prompt(s) if s.obj == 2 && s.points.len() == 1));
        // frame=0 given is not "no frame".
        assert_eq!(
            parse("obj=1;frame=0;box=1,1,5,5").unwrap()[0].frame,
            Some(0)
        );
    }

    #[test]
    fn remove_and_reset() {
        let c = parse("remove=3|reset|remove=4;frame=9|frame=2;reset").unwrap();
        assert_eq!(
            c[0],
            Command {
                frame: None,
                action: Action::Remove(3)
            }
        );
        assert_eq!(
            c[1],
            Command {
                frame: None,
                action: Action::Reset
            }
        );
        assert_eq!(
            c[2],
            Command {
                frame: Some(9),
                action: Action::Remove(4)
            }
        );
        assert_eq!(
            c[3],
            Command {
                frame: Some(2),
                action: Action::Reset
            }
        );
    }

    #[test]
    fn bad_prompts_name_the_item() {
        for bad in [
            "",
            "  |  ",
            "obj=1",
            "obj=1;box=1,2,3",
            "obj=0;box=1,2,3,4",
            "obj=70000;box=1,2,3,4",
            "obj=1;frame=-1;box=1,2,3,4",
            "remove=x",
            "remove=0",
            "remove=1;box=1,2,3,4",
            "reset=1",
            "reset;remove=2",
            "obj=1;box=1,2,3,4|",
            "obj=1;box=1,2,3,4|bogus",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let e = parse("obj=1;box=1,2,3,4|obj=2;bx=1").unwrap_err();
        assert!(matches!(e, PromptError::Item { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("bx"), "{e}");
    }

    #[test]
    fn schedule_counts_received_frames() {
        let mut s = Schedule::default();
        let cmd = |frame, id| Command {
            frame,
            action: Action::Remove(id),
        };
        // 3 frames received so far (0, 1, 2): the next is 3.
        assert_eq!(s.place(cmd(None, 1), 3), Placed::Next);
        assert_eq!(s.place(cmd(Some(3), 2), 3), Placed::Next);
        assert_eq!(s.place(cmd(Some(5), 3), 3), Placed::Later(5));
        assert_eq!(s.place(cmd(Some(1), 4), 3), Placed::Late { asked: 1 });
        assert_eq!(
            s.take(3),
            [Action::Remove(1), Action::Remove(2), Action::Remove(4)]
        );
        assert!(s.take(4).is_empty());
        assert_eq!(s.take(5), [Action::Remove(3)]);
        assert!(s.is_empty());
    }
}

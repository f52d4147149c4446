//! The command line of an rcl node: `--ros-args` with `-r FROM:=TO` remaps (`__node`, `__ns`
//! included), `-p NAME:=VALUE` parameters and `--params-file FILE`, and the name resolution
//! rcl applies (relative names under the namespace, `~` for the node's own name, remaps
//! matched on resolved names). Parameter values are typed as rcl types them (YAML scalars).

use std::collections::BTreeMap;
use std::path::Path;

/// What is wrong with the command line, a parameter or a name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    #[error("`{flag}` needs a value")]
    MissingValue { flag: String },
    #[error("bad remap rule `{rule}`: expected FROM:=TO (e.g. `-r image:=/camera/image_raw`)")]
    BadRemap { rule: String },
    #[error("bad parameter `{arg}`: expected NAME:=VALUE (e.g. `-p model:=/models/edgetam`)")]
    BadParam { arg: String },
    #[error("unknown argument `{arg}` (see --help)")]
    Unknown { arg: String },
    #[error("bad node name `{name}`: letters, digits and `_`, not starting with a digit")]
    BadNodeName { name: String },
    #[error("bad name `{name}`: {reason}")]
    BadName { name: String, reason: String },
    #[error("parameter `{name}`: {reason}")]
    BadValue { name: String, reason: String },
    #[error("unknown parameter `{name}` (see --help for the parameters)")]
    UnknownParam { name: String },
    #[error("missing parameter `model` (e.g. `-p model:=/models/edgetam`)")]
    NoModel,
    #[error("params file {path}: {reason}")]
    ParamsFile { path: String, reason: String },
}

/// A parameter value, typed as rcl types a YAML scalar.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(String),
}

impl ParamValue {
    /// `true`/`false` (any case), integers, floats (with `.`, `e`, `.inf`, `.nan`), quoted or
    /// other text as a string.
    pub fn parse(text: &str) -> Self {
        let t = text.trim();
        if let Some(s) = unquote(t) {
            return Self::Str(s.to_string());
        }
        match t.to_ascii_lowercase().as_str() {
            "true" => return Self::Bool(true),
            "false" => return Self::Bool(false),
            ".inf" | "+.inf" => return Self::Double(f64::INFINITY),
            "-.inf" => return Self::Double(f64::NEG_INFINITY),
            ".nan" => return Self::Double(f64::NAN),
            _ => {}
        }
        if let Ok(i) = t.parse::<i64>() {
            return Self::Int(i);
        }
        let numeric = t
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
        if numeric && t.chars().any(|c| c.is_ascii_digit()) {
            if let Ok(f) = t.parse::<f64>() {
                return Self::Double(f);
            }
        }
        Self::Str(t.to_string())
    }

    fn type_name(&self) -> &'static str {
        match self {
            Self::Bool(_) => "a bool",
            Self::Int(_) => "an integer",
            Self::Double(_) => "a double",
            Self::Str(_) => "a string",
        }
    }
}

fn unquote(t: &str) -> Option<&str> {
    let q = t.chars().next()?;
    (matches!(q, '"' | '\'') && t.len() >= 2 && t.ends_with(q)).then(|| &t[1..t.len() - 1])
}

/// The parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeArgs {
    pub node_name: String,
    /// Absolute, `/` for the root.
    pub namespace: String,
    /// `(from, to)` rules as written (resolved when a name is looked up).
    pub remaps: Vec<(String, String)>,
    /// Parameters in the order given (later ones win).
    pub params: BTreeMap<String, ParamValue>,
    pub help: bool,
    /// `--log-level` (debug, info, warn, error).
    pub log_level: log::LevelFilter,
}

impl NodeArgs {
    /// Parses `args` (without the program name). ROS flags are accepted inside and outside
    /// `--ros-args`; `--` ends a `--ros-args` section.
    pub fn parse<I, S>(args: I) -> Result<Self, ArgError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut out = NodeArgs {
            node_name: "edgetam".into(),
            namespace: "/".into(),
            remaps: Vec::new(),
            params: BTreeMap::new(),
            help: false,
            log_level: log::LevelFilter::Info,
        };
        let mut files = Vec::new();
        let args: Vec<String> = args.into_iter().map(Into::into).collect();
        let mut i = 0;
        let mut rules = Vec::new();
        while i < args.len() {
            let a = args[i].as_str();
            let mut value = |flag: &str| -> Result<String, ArgError> {
                i += 1;
                args.get(i).cloned().ok_or_else(|| ArgError::MissingValue {
                    flag: flag.to_string(),
                })
            };
            match a {
                "--ros-args" | "--" => {}
                "-h" | "--help" => out.help = true,
                "-r" | "--remap" => rules.push(value(a)?),
                "-p" | "--param" => {
                    let p = value(a)?;
                    let (name, v) = p
                        .split_once(":=")
                        .filter(|(n, _)| !n.trim().is_empty())
                        .ok_or(ArgError::BadParam { arg: p.clone() })?;
                    out.params
                        .insert(name.trim().to_string(), ParamValue::parse(v));
                }
                "--params-file" => files.push(value(a)?),
                "--log-level" => {
                    let v = value(a)?;
                    // `--log-level NAME:=LEVEL` (a logger's level) applies to the node's.
                    let level = v.rsplit_once(":=").map_or(v.as_str(), |(_, l)| l);
                    out.log_level =
                        crate::logging::parse_level(level).ok_or_else(|| ArgError::BadValue {
                            name: "--log-level".into(),
                            reason: format!("`{v}` (expected debug, info, warn or error)"),
                        })?;
                }
                _ => {
                    if let Some(rule) = a.strip_prefix("--remap=") {
                        rules.push(rule.to_string());
                    } else {
                        return Err(ArgError::Unknown { arg: a.to_string() });
                    }
                }
            }
            i += 1;
        }
        // `__node` first: node-targeted rules (`NODE:from:=to`) name the node.
        let mut parsed = Vec::new();
        for rule in rules {
            let (from, to) = rule
                .split_once(":=")
                .filter(|(f, t)| !f.is_empty() && !t.is_empty())
                .ok_or(ArgError::BadRemap { rule: rule.clone() })?;
            let (target, from) = match from.rsplit_once(':') {
                Some((node, f)) => (Some(node.to_string()), f.to_string()),
                None => (None, from.to_string()),
            };
            parsed.push((target, from, to.to_string()));
        }
        for (target, from, to) in &parsed {
            if (from == "__node" || from == "__name")
                && target.as_ref().is_none_or(|t| *t == out.node_name)
            {
                check_node_name(to)?;
                out.node_name = to.clone();
            }
        }
        for (target, from, to) in parsed {
            if target.as_ref().is_some_and(|t| *t != out.node_name) {
                continue;
            }
            match from.as_str() {
                "__node" | "__name" => {}
                "__ns" => out.namespace = check_namespace(&to)?,
                _ => out.remaps.push((from, to)),
            }
        }
        // `-p` values override a params file's; later files override earlier ones.
        if !files.is_empty() {
            let explicit = std::mem::take(&mut out.params);
            let mut merged = BTreeMap::new();
            for path in &files {
                for (k, v) in read_params_file(Path::new(path), &out.node_name, &out.namespace)? {
                    merged.insert(k, v);
                }
            }
            merged.extend(explicit);
            out.params = merged;
        }
        Ok(out)
    }

    /// The node's fully qualified name (`/ns/name`).
    pub fn fully_qualified_name(&self) -> String {
        join(&self.namespace, &self.node_name)
    }

    /// The absolute topic name `name` resolves to: expanded (`~`, relative names), then
    /// remapped by the first rule whose `from` expands to the same name.
    pub fn resolve(&self, name: &str) -> Result<String, ArgError> {
        let expanded = self.expand(name)?;
        for (from, to) in &self.remaps {
            if self.expand(from)? == expanded {
                return self.expand(to);
            }
        }
        Ok(expanded)
    }

    /// `name` expanded to an absolute name (`~`, relative names), without remapping.
    pub fn expand(&self, name: &str) -> Result<String, ArgError> {
        let bad = |reason: &str| ArgError::BadName {
            name: name.to_string(),
            reason: reason.to_string(),
        };
        let full = if name == "~" {
            self.fully_qualified_name()
        } else if let Some(rest) = name.strip_prefix("~/") {
            join(&self.fully_qualified_name(), rest)
        } else if name.starts_with('/') {
            name.to_string()
        } else {
            join(&self.namespace, name)
        };
        if full.ends_with('/') || full.contains("//") {
            return Err(bad("empty name token"));
        }
        for tok in full[1..].split('/') {
            check_token(tok).map_err(|r| bad(&r))?;
        }
        Ok(full)
    }
}

fn join(ns: &str, name: &str) -> String {
    if ns == "/" {
        format!("/{name}")
    } else {
        format!("{ns}/{name}")
    }
}

fn check_token(tok: &str) -> Result<(), String> {
    let first = tok.chars().next().ok_or("empty name token")?;
    if !(first.is_ascii_alphabetic() || first == '_') {
        return Err(format!("`{tok}` must start with a letter or `_`"));
    }
    if let Some(c) = tok
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return Err(format!("`{c}` is not allowed (letters, digits, `_`, `/`)"));
    }
    if tok.contains("__") {
        return Err("`__` is not allowed".into());
    }
    Ok(())
}

fn check_node_name(name: &str) -> Result<(), ArgError> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ArgError::BadNodeName {
            name: name.to_string(),
        })
    }
}

/// `/`, or `/a/b` (a missing leading `/` is added, a trailing one removed, as rcl does).
fn check_namespace(ns: &str) -> Result<String, ArgError> {
    let trimmed = ns.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok("/".into());
    }
    let abs = if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    };
    for tok in abs[1..].split('/') {
        check_token(tok).map_err(|reason| ArgError::BadName {
            name: ns.to_string(),
            reason,
        })?;
    }
    Ok(abs)
}

/// The parameters a ROS 2 YAML params file gives this node: the `ros__parameters` maps under
/// `/**`, `**`, the node's name or its fully qualified name (`/ns/name`, `/**/name`). Nested
/// maps give dotted names. Scalars only (lists are refused).
pub fn read_params_file(
    path: &Path,
    node: &str,
    namespace: &str,
) -> Result<BTreeMap<String, ParamValue>, ArgError> {
    let err = |reason: String| ArgError::ParamsFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    parse_params_yaml(&text, node, namespace).map_err(err)
}

/// [`read_params_file`] on text.
pub fn parse_params_yaml(
    text: &str,
    node: &str,
    namespace: &str,
) -> Result<BTreeMap<String, ParamValue>, String> {
    let fqn = join(namespace, node);
    let matches = |key: &str| {
        let k = key.trim_end_matches('/');
        k == "/**"
            || k == "**"
            || k == node
            || k == fqn
            || k == fqn.trim_start_matches('/')
            || k == format!("/**/{node}")
    };
    let mut out = BTreeMap::new();
    // (indent, key) of the open maps.
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = strip_comment(raw);
        if line.trim().is_empty() || line.trim() == "---" {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let body = line.trim();
        if body.starts_with('-') {
            return Err(format!("line {}: lists are not supported", n + 1));
        }
        let (key, value) = body
            .split_once(':')
            .ok_or_else(|| format!("line {}: expected `key: value`", n + 1))?;
        let key = unquote(key.trim()).unwrap_or(key.trim()).to_string();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let value = value.trim();
        if value.is_empty() {
            stack.push((indent, key));
            continue;
        }
        // A scalar: a parameter if under `<node>: ros__parameters:`.
        if stack.len() >= 2 && matches(&stack[0].1) && stack[1].1 == "ros__parameters" {
            if value.starts_with('[') {
                return Err(format!("line {}: list parameters are not supported", n + 1));
            }
            let mut name: Vec<&str> = stack[2..].iter().map(|(_, k)| k.as_str()).collect();
            name.push(&key);
            out.insert(name.join("."), ParamValue::parse(value));
        }
    }
    Ok(out)
}

/// The line without a `#` comment (a `#` at the start or after a blank, outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev_blank => return &line[..i],
            _ => {}
        }
        prev_blank = c.is_whitespace();
    }
    line
}

/// The node's parameters, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub model: String,
    /// `None`: the model's default.
    pub input_size: Option<usize>,
    pub precision: edgetam_tracker::Precision,
    /// `None`: automatic.
    pub threads: Option<usize>,
    pub publish_overlay: bool,
    pub drop_frames: bool,
    pub encoder_ahead: bool,
    pub prompts: String,
    pub match_iou: f32,
    pub reseed_after: u32,
    pub max_objects: usize,
    pub min_confidence: f64,
}

/// Every parameter with its type and default, for `--help` and the checks.
pub const PARAMS: &[(&str, &str, &str, &str)] = &[
    ("model", "string", "(required)", "model folder (config.json + model.safetensors), .pt checkpoint or hub id owner/name"),
    ("input_size", "int", "0", "model input size in pixels (multiple of 16), 0 = the model's default"),
    ("precision", "string", "f32", "f32 or bf16 (bf16 is refused where this machine cannot run it)"),
    ("threads", "int", "0", "compute threads, 0 = automatic"),
    ("publish_overlay", "bool", "false", "publish ~/overlay (rgb8: masks and boxes drawn on the frame)"),
    ("drop_frames", "bool", "true", "live: the newest frame wins while the tracker is busy (drops counted); false: every frame tracked"),
    ("encoder_ahead", "bool", "true", "run the image encoder of the next frame on its own thread"),
    ("prompts", "string", "\"\"", "prompts at start-up, `|`-separated, in the ~/prompt syntax"),
    ("match_iou", "double", "0.3", "~/prompts: IoU at which a detection is a tracked object"),
    ("reseed_after", "int", "5", "~/prompts: re-prompt an object absent this many tracked frames (0 = never)"),
    ("max_objects", "int", "16", "~/prompts: most objects detections start"),
    ("min_confidence", "double", "0.0", "~/prompts: detections scoring below this are ignored"),
];

impl Params {
    /// Checks and types the parameters (unknown names and wrong types are errors).
    pub fn from_map(map: &BTreeMap<String, ParamValue>) -> Result<Self, ArgError> {
        for name in map.keys() {
            if !PARAMS.iter().any(|p| p.0 == name) && name != "use_sim_time" {
                return Err(ArgError::UnknownParam { name: name.clone() });
            }
        }
        let bad = |name: &str, reason: String| ArgError::BadValue {
            name: name.to_string(),
            reason,
        };
        let text = |name: &str| -> Option<String> {
            map.get(name).map(|v| match v {
                ParamValue::Str(s) => s.clone(),
                ParamValue::Int(i) => i.to_string(),
                ParamValue::Double(d) => d.to_string(),
                ParamValue::Bool(b) => b.to_string(),
            })
        };
        let int = |name: &str, default: i64, min: i64, max: i64| -> Result<i64, ArgError> {
            match map.get(name) {
                None => Ok(default),
                Some(ParamValue::Int(i)) if (min..=max).contains(i) => Ok(*i),
                Some(ParamValue::Int(i)) => Err(bad(name, format!("{i} is outside {min}..={max}"))),
                Some(v) => Err(bad(
                    name,
                    format!("expected an integer, got {}", v.type_name()),
                )),
            }
        };
        let boolean = |name: &str, default: bool| -> Result<bool, ArgError> {
            match map.get(name) {
                None => Ok(default),
                Some(ParamValue::Bool(b)) => Ok(*b),
                Some(v) => Err(bad(
                    name,
                    format!("expected true or false, got {}", v.type_name()),
                )),
            }
        };
        let double = |name: &str, default: f64, min: f64, max: f64| -> Result<f64, ArgError> {
            let v = match map.get(name) {
                None => return Ok(default),
                Some(ParamValue::Double(d)) => *d,
                Some(ParamValue::Int(i)) => *i as f64,
                Some(v) => {
                    return Err(bad(
                        name,
                        format!("expected a number, got {}", v.type_name()),
                    ))
                }
            };
            if (min..=max).contains(&v) {
                Ok(v)
            } else {
                Err(bad(name, format!("{v} is outside {min}..={max}")))
            }
        };
        let model = text("model")
            .filter(|m| !m.trim().is_empty())
            .ok_or(ArgError::NoModel)?;
        let input_size = int("input_size", 0, 0, i64::from(u32::MAX))?;
        let threads = int("threads", 0, 0, 4096)?;
        let precision = match map.get("precision") {
            None => edgetam_tracker::Precision::F32,
            Some(ParamValue::Str(s)) => s.parse().map_err(|e: String| bad("precision", e))?,
            Some(v) => {
                return Err(bad(
                    "precision",
                    format!("expected f32 or bf16, got {}", v.type_name()),
                ))
            }
        };
        Ok(Self {
            model,
            input_size: (input_size > 0).then_some(input_size as usize),
            precision,
            threads: (threads > 0).then_some(threads as usize),
            publish_overlay: boolean("publish_overlay", false)?,
            drop_frames: boolean("drop_frames", true)?,
            encoder_ahead: boolean("encoder_ahead", true)?,
            prompts: text("prompts").unwrap_or_default(),
            match_iou: double("match_iou", 0.3, 0.0, 1.0)? as f32,
            reseed_after: int("reseed_after", 5, 0, i64::from(u32::MAX))? as u32,
            max_objects: int("max_objects", 16, 0, i64::from(u16::MAX))? as usize,
            min_confidence: double("min_confidence", 0.0, f64::NEG_INFINITY, f64::INFINITY)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<NodeArgs, ArgError> {
        NodeArgs::parse(s.split_whitespace())
    }

    #[test]
    fn defaults_and_resolution() {
        let a = parse("").unwrap();
        assert_eq!(
            (a.node_name.as_str(), a.namespace.as_str()),
            ("edgetam", "/")
        );
        assert_eq!(a.resolve("image").unwrap(), "/image");
        assert_eq!(a.resolve("~/mask").unwrap(), "/edgetam/mask");
        assert_eq!(a.resolve("/diagnostics").unwrap(), "/diagnostics");
    }

    #[test]
    fn node_ns_and_remaps() {
        let a = parse(
            "--ros-args -r __node:=tracker -r __ns:=/robot1 -r image:=/camera/color/image_raw \
             -r ~/mask:=masks -r other:__ns:=/x",
        )
        .unwrap();
        assert_eq!(a.fully_qualified_name(), "/robot1/tracker");
        assert_eq!(a.resolve("image").unwrap(), "/camera/color/image_raw");
        assert_eq!(a.resolve("~/mask").unwrap(), "/robot1/masks");
        assert_eq!(
            a.resolve("~/detections").unwrap(),
            "/robot1/tracker/detections"
        );
        // A rule naming the resolved name matches too; a rule for another node is ignored.
        let b = parse("-r __ns:=robot2/ -r /robot2/image:=cam -r x:image:=/nope").unwrap();
        assert_eq!(b.namespace, "/robot2");
        assert_eq!(b.resolve("image").unwrap(), "/robot2/cam");
        // Node-targeted __node rule.
        let c = parse("-r edgetam:__node:=t2").unwrap();
        assert_eq!(c.node_name, "t2");
    }

    #[test]
    fn bad_command_lines() {
        assert!(matches!(parse("-r image"), Err(ArgError::BadRemap { .. })));
        assert!(matches!(parse("-r"), Err(ArgError::MissingValue { .. })));
        assert!(matches!(parse("-p model"), Err(ArgError::BadParam { .. })));
        assert!(matches!(
            parse("--frobnicate"),
            Err(ArgError::Unknown { .. })
        ));
        assert!(matches!(
            parse("-r __node:=9x"),
            Err(ArgError::BadNodeName { .. })
        ));
        assert!(parse("-r __ns:=/a b").is_err());
        assert!(matches!(
            parse("-r __ns:=/a/1b"),
            Err(ArgError::BadName { .. })
        ));
        let a = parse("-r image:=/bad//name").unwrap();
        assert!(matches!(a.resolve("image"), Err(ArgError::BadName { .. })));
        assert!(parse("--help").unwrap().help);
    }

    #[test]
    fn parameter_types() {
        use ParamValue::{Bool, Double, Int, Str};
        for (text, want) in [
            ("true", Bool(true)),
            ("False", Bool(false)),
            ("512", Int(512)),
            ("-3", Int(-3)),
            ("0.5", Double(0.5)),
            ("1e-3", Double(1e-3)),
            ("'512'", Str("512".into())),
            ("/m/x.pt", Str("/m/x.pt".into())),
            ("owner/name", Str("owner/name".into())),
        ] {
            assert_eq!(ParamValue::parse(text), want, "{text}");
        }
    }

    fn params(s: &str) -> Result<Params, ArgError> {
        Params::from_map(&parse(s)?.params)
    }

    #[test]
    fn parameters_checked() {
        let p = params(
            "-p model:=/m -p input_size:=256 -p drop_frames:=false -p match_iou:=1 \
             -p threads:=2 -p precision:=bf16 -p prompts:=obj=1;box=1,2,3,4",
        )
        .unwrap();
        assert_eq!(p.model, "/m");
        assert_eq!(p.input_size, Some(256));
        assert!(!p.drop_frames && p.encoder_ahead && !p.publish_overlay);
        assert_eq!(p.match_iou, 1.0);
        assert_eq!(p.threads, Some(2));
        assert_eq!(p.precision, edgetam_tracker::Precision::Bf16);
        assert_eq!(p.prompts, "obj=1;box=1,2,3,4");
        let d = params("-p model:=/m").unwrap();
        assert_eq!(
            (d.input_size, d.threads, d.max_objects, d.reseed_after),
            (None, None, 16, 5)
        );
        assert!(d.drop_frames);
        assert!(matches!(params(""), Err(ArgError::NoModel)));
        for bad in [
            "-p model:=/m -p input_size:=big",
            "-p model:=/m -p input_size:=-1",
            "-p model:=/m -p input_size:=1.5",
            "-p model:=/m -p drop_frames:=1",
            "-p model:=/m -p precision:=f16",
            "-p model:=/m -p match_iou:=2",
            "-p model:=/m -p threads:=yes",
        ] {
            assert!(
                matches!(params(bad), Err(ArgError::BadValue { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            params("-p model:=/m -p input_szie:=256"),
            Err(ArgError::UnknownParam { .. })
        ));
    }

    #[test]
    fn params_file() {
        let yaml = "\
# comment
/**:
  ros__parameters:
    input_size: 256   # trailing
    prompts: \"obj=1;box=1,2,3,4\"
tracker:
  ros__parameters:
    model: /models/edgetam
    publish_overlay: true
other:
  ros__parameters:
    model: /nope
";
        let p = parse_params_yaml(yaml, "tracker", "/").unwrap();
        assert_eq!(p["model"], ParamValue::Str("/models/edgetam".into()));
        assert_eq!(p["input_size"], ParamValue::Int(256));
        assert_eq!(p["publish_overlay"], ParamValue::Bool(true));
        assert_eq!(p["prompts"], ParamValue::Str("obj=1;box=1,2,3,4".into()));
        let q = parse_params_yaml(yaml, "edgetam", "/").unwrap();
        assert!(!q.contains_key("model"));
        assert!(parse_params_yaml("/**:\n  ros__parameters:\n    - x\n", "n", "/").is_err());
        // A file, and a -p after it wins.
        let dir = std::env::temp_dir().join(format!("edgetam-ros2-args-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.yaml");
        std::fs::write(&f, yaml).unwrap();
        let a = NodeArgs::parse([
            "--ros-args",
            "-r",
            "__node:=tracker",
            "--params-file",
            f.to_str().unwrap(),
            "-p",
            "input_size:=512",
        ])
        .unwrap();
        assert_eq!(a.params["input_size"], ParamValue::Int(512));
        assert_eq!(a.params["model"], ParamValue::Str("/models/edgetam".into()));
        let missing = NodeArgs::parse(["--params-file", "/nonexistent/p.yaml"]);
        assert!(matches!(missing, Err(ArgError::ParamsFile { .. })));
        let _ = std::fs::remove_dir_all(dir);
    }
}

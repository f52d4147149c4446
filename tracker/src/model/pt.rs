//! Meta's original PyTorch checkpoints (`edgetam.pt`), read with bounds.
//!
//! A `torch.save` file is a zip archive (entries stored, not compressed): `<dir>/data.pkl`, a
//! pickle of `{"model": state_dict}` whose tensors are `torch._utils._rebuild_tensor_v2` calls
//! naming a storage by persistent id, and one entry `<dir>/data/<key>` per storage holding its
//! raw little-endian elements.
//!
//! The pickle is run here by a small machine of its own rather than candle's reader, because a
//! checkpoint may come from anyone: every length is checked against the bytes that are left
//! before anything is allocated for it, values live in one arena (a memo reference shares a node
//! instead of copying a tree, so no input grows memory faster than its own length), a malformed
//! stack is an error rather than a panic, and every tensor's rank, shape, strides and storage
//! are checked against [`crate::limits`] and the archive before its bytes are read.

use std::collections::HashMap;
use std::io::{Read, Seek};
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{Error, Result};
use crate::limits::{
    self, MAX_CHECKPOINT_BYTES, MAX_CHECKPOINT_TENSORS, MAX_PICKLE_BYTES, MAX_TENSOR_ELEMENTS,
    MAX_TENSOR_RANK,
};

/// Every tensor of the state dict under `key` (the whole pickled object when `None`), in pickle
/// order, with its checkpoint (original) name.
pub(crate) fn read_tensors<R: Read + Seek>(
    reader: R,
    key: Option<&str>,
    path: &Path,
) -> Result<Vec<(String, Tensor)>> {
    let bad = |message: String| Error::WeightFile {
        path: path.to_owned(),
        message,
    };
    let mut zip = zip::ZipArchive::new(reader)
        .map_err(|e| bad(format!("not a readable PyTorch zip archive: {e}")))?;
    let pkl_name = (0..zip.len())
        .filter_map(|i| zip.name_for_index(i)?.ok().map(|n| n.into_owned()))
        .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
        .ok_or_else(|| bad("no `<archive>/data.pkl` in the zip (not a torch.save file?)".into()))?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_owned();
    if let Ok(mut f) = zip.by_name(&format!("{prefix}byteorder")) {
        let mut order = String::new();
        let _ = f.by_ref().take(16).read_to_string(&mut order);
        if order.trim() != "little" {
            return Err(bad(format!(
                "byte order `{}` is not supported (little-endian only)",
                order.trim()
            )));
        }
    }
    let pickle = {
        let f = zip
            .by_name(&pkl_name)
            .map_err(|e| bad(format!("cannot read {pkl_name}: {e}")))?;
        limits::check(
            || format!("{} {pkl_name} size in bytes", path.display()),
            f.size(),
            MAX_PICKLE_BYTES,
        )?;
        let mut bytes = Vec::new();
        f.take(MAX_PICKLE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("cannot read {pkl_name}: {e}")))?;
        bytes
    };
    let machine = Machine::run(&pickle).map_err(|e| bad(format!("{pkl_name}: {e}")))?;
    let root = machine.root;
    let dict = match key {
        None => root,
        Some(key) => machine.dict_get(root, key).ok_or_else(|| {
            bad(format!(
                "no tensors found under the `{key}` key (is this an EdgeTAM checkpoint?)"
            ))
        })?,
    };
    let specs = machine
        .state_dict(dict)
        .map_err(|e| bad(format!("{pkl_name}: {e}")))?;
    limits::check(
        || format!("{} tensor count", path.display()),
        specs.len(),
        MAX_CHECKPOINT_TENSORS,
    )?;
    let mut storages: HashMap<String, (DType, Vec<u8>)> = HashMap::new();
    let mut total: u64 = 0;
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let spec = spec.check(path)?;
        if !storages.contains_key(&spec.storage) {
            let bytes_len = spec.storage_numel as u64 * spec.dtype.size_in_bytes() as u64;
            total += bytes_len;
            limits::check(
                || format!("{} tensor data in bytes", path.display()),
                total,
                MAX_CHECKPOINT_BYTES,
            )?;
            let entry = format!("{prefix}data/{}", spec.storage);
            let f = zip.by_name(&entry).map_err(|e| {
                bad(format!(
                    "tensor `{}`: storage {entry} cannot be read: {e}",
                    spec.name
                ))
            })?;
            if f.size() != bytes_len {
                return Err(bad(format!(
                    "tensor `{}`: storage {entry} holds {} bytes, its {} {:?} elements need {bytes_len}",
                    spec.name,
                    f.size(),
                    spec.storage_numel,
                    spec.dtype
                )));
            }
            // Grown as bytes arrive (never sized by the claim alone).
            let mut bytes = Vec::new();
            f.take(bytes_len)
                .read_to_end(&mut bytes)
                .map_err(|e| bad(format!("tensor `{}`: {entry}: {e}", spec.name)))?;
            if bytes.len() as u64 != bytes_len {
                return Err(bad(format!(
                    "tensor `{}`: storage {entry} ends after {} of {bytes_len} bytes",
                    spec.name,
                    bytes.len()
                )));
            }
            storages.insert(spec.storage.clone(), (spec.dtype, bytes));
        }
        let (dtype, bytes) = &storages[&spec.storage];
        if *dtype != spec.dtype {
            return Err(bad(format!(
                "tensor `{}` reads storage {} as {:?}, another tensor as {dtype:?}",
                spec.name, spec.storage, spec.dtype
            )));
        }
        let data = spec.gather(bytes);
        let t = Tensor::from_raw_buffer(&data, spec.dtype, &spec.shape, &Device::Cpu)
            .map_err(|e| bad(format!("tensor `{}`: {e}", spec.name)))?;
        out.push((spec.name, t));
    }
    Ok(out)
}

/// One tensor as the pickle describes it (unchecked numbers straight from the file).
#[derive(Debug)]
struct RawSpec {
    name: String,
    storage: String,
    storage_class: String,
    storage_numel: i64,
    offset: i64,
    shape: Vec<i64>,
    stride: Vec<i64>,
}

/// A tensor whose numbers passed [`RawSpec::check`].
struct Spec {
    name: String,
    storage: String,
    dtype: DType,
    storage_numel: usize,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl RawSpec {
    fn check(self, path: &Path) -> Result<Spec> {
        let name = self.name;
        let bad = |message: String| Error::WeightFile {
            path: path.to_owned(),
            message: format!("tensor `{name}`: {message}"),
        };
        let dtype = match self.storage_class.as_str() {
            "FloatStorage" => DType::F32,
            "DoubleStorage" => DType::F64,
            "HalfStorage" => DType::F16,
            "BFloat16Storage" => DType::BF16,
            "ByteStorage" => DType::U8,
            "IntStorage" => DType::I32,
            "ShortStorage" => DType::I16,
            "LongStorage" => DType::I64,
            other => return Err(bad(format!("storage type `{other}` is not supported"))),
        };
        limits::check(
            || format!("{} tensor `{name}` rank", path.display()),
            self.shape.len(),
            MAX_TENSOR_RANK,
        )?;
        if self.stride.len() != self.shape.len() {
            return Err(bad(format!(
                "{} strides for {} dimensions",
                self.stride.len(),
                self.shape.len()
            )));
        }
        let non_negative = |what: &str, v: i64| -> Result<usize> {
            usize::try_from(v).map_err(|_| bad(format!("negative {what} {v}")))
        };
        let mut elements: u128 = 1;
        let mut shape = Vec::with_capacity(self.shape.len());
        for &d in &self.shape {
            let d = non_negative("dimension", d)?;
            elements = elements.saturating_mul(d as u128);
            shape.push(d);
        }
        limits::check(
            || {
                format!(
                    "{} tensor `{name}` ({shape:?}) element count",
                    path.display()
                )
            },
            elements,
            MAX_TENSOR_ELEMENTS,
        )?;
        let storage_numel = non_negative("storage size", self.storage_numel)?;
        limits::check(
            || format!("{} storage {} element count", path.display(), self.storage),
            storage_numel,
            MAX_TENSOR_ELEMENTS,
        )?;
        let offset = non_negative("storage offset", self.offset)?;
        let stride = self
            .stride
            .iter()
            .map(|&s| non_negative("stride", s))
            .collect::<Result<Vec<_>>>()?;
        if elements > 0 {
            // The last element read: offset + sum((d - 1) * stride), within the storage.
            let last = shape
                .iter()
                .zip(&stride)
                .fold(offset as u128, |acc, (&d, &s)| {
                    acc.saturating_add((d as u128 - 1).saturating_mul(s as u128))
                });
            if last >= storage_numel as u128 {
                return Err(bad(format!(
                    "shape {shape:?}, strides {stride:?} and offset {offset} read element {last} \
                     of a storage of {storage_numel}"
                )));
            }
        }
        Ok(Spec {
            name,
            storage: self.storage,
            dtype,
            storage_numel,
            offset,
            shape,
            stride,
        })
    }
}

impl Spec {
    /// The tensor's elements in row-major order (a copy of the storage slice when contiguous).
    fn gather(&self, storage: &[u8]) -> Vec<u8> {
        let es = self.dtype.size_in_bytes();
        let n: usize = self.shape.iter().product();
        let mut contiguous = true;
        let mut expect = 1usize;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d > 1 && s != expect {
                contiguous = false;
            }
            expect *= d;
        }
        if contiguous {
            let start = self.offset * es;
            return storage[start..start + n * es].to_vec();
        }
        let mut out = Vec::with_capacity(n * es);
        let mut index = vec![0usize; self.shape.len()];
        for _ in 0..n {
            let at = self.offset
                + index
                    .iter()
                    .zip(&self.stride)
                    .map(|(i, s)| i * s)
                    .sum::<usize>();
            out.extend_from_slice(&storage[at * es..(at + 1) * es]);
            for axis in (0..index.len()).rev() {
                index[axis] += 1;
                if index[axis] < self.shape[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
        out
    }
}

type Id = usize;

/// A pickled value. Containers hold arena ids, so a memo reference shares a node.
#[derive(Debug)]
enum Node {
    None,
    Bool(bool),
    Int(i64),
    Float,
    Str(String),
    Bytes,
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Global { module: String, name: String },
    Reduce { callable: Id, args: Id },
    Build { obj: Id },
    PersId(Id),
}

/// The pickle machine: the value arena, the stack with its marks, the memo.
struct Machine {
    nodes: Vec<Node>,
    root: Id,
}

/// Bytes of the pickle still to be read.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    fn take(&mut self, n: u64) -> std::result::Result<&'a [u8], String> {
        let left = (self.data.len() - self.pos) as u64;
        if n > left {
            return Err(format!(
                "a {n}-byte argument at byte {} runs past the end ({left} left)",
                self.pos
            ));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn le<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        Ok(a)
    }

    fn line(&mut self) -> std::result::Result<&'a str, String> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .take(256)
            .position(|&b| b == b'\n')
            .ok_or_else(|| format!("unterminated name at byte {}", self.pos))?;
        self.pos += end + 1;
        std::str::from_utf8(&rest[..end]).map_err(|_| "a name is not UTF-8".to_string())
    }
}

impl Machine {
    fn run(data: &[u8]) -> std::result::Result<Self, String> {
        let mut nodes: Vec<Node> = Vec::new();
        let mut stack: Vec<Id> = Vec::new();
        let mut marks: Vec<usize> = Vec::new();
        let mut memo: HashMap<u64, Id> = HashMap::new();
        let mut input = Input { data, pos: 0 };
        let push = |nodes: &mut Vec<Node>, stack: &mut Vec<Id>, n: Node| {
            nodes.push(n);
            stack.push(nodes.len() - 1);
        };
        fn pop(stack: &mut Vec<Id>, marks: &[usize]) -> std::result::Result<Id, String> {
            if stack.len() <= marks.last().copied().unwrap_or(0) {
                return Err("pop from an empty stack (or past a mark)".into());
            }
            stack.pop().ok_or_else(|| "pop from an empty stack".into())
        }
        fn pop_mark(
            stack: &mut Vec<Id>,
            marks: &mut Vec<usize>,
        ) -> std::result::Result<Vec<Id>, String> {
            let m = marks.pop().ok_or("no mark to pop to")?;
            Ok(stack.split_off(m.min(stack.len())))
        }
        fn text(b: &[u8]) -> std::result::Result<String, String> {
            String::from_utf8(b.to_vec()).map_err(|_| "a string is not UTF-8".to_string())
        }
        loop {
            let at = input.pos;
            let op = input
                .u8()
                .map_err(|_| "the pickle ends without STOP".to_string())?;
            match op {
                0x80 => {
                    input.u8()?;
                }
                0x95 => {
                    input.le::<8>()?;
                }
                b'.' => {
                    let root = pop(&mut stack, &marks)?;
                    return Ok(Self { nodes, root });
                }
                b'(' => marks.push(stack.len()),
                b'0' => {
                    pop(&mut stack, &marks)?;
                }
                b'1' => {
                    pop_mark(&mut stack, &mut marks)?;
                }
                b'2' => {
                    let top = *stack.last().ok_or("DUP on an empty stack")?;
                    stack.push(top);
                }
                b'N' => push(&mut nodes, &mut stack, Node::None),
                0x88 => push(&mut nodes, &mut stack, Node::Bool(true)),
                0x89 => push(&mut nodes, &mut stack, Node::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(input.le()?);
                    push(&mut nodes, &mut stack, Node::Int(v.into()))
                }
                b'K' => {
                    let v = input.u8()?;
                    push(&mut nodes, &mut stack, Node::Int(v.into()))
                }
                b'M' => {
                    let v = u16::from_le_bytes(input.le()?);
                    push(&mut nodes, &mut stack, Node::Int(v.into()))
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        u64::from(input.u8()?)
                    } else {
                        u64::from(u32::from_le_bytes(input.le()?))
                    };
                    let b = input.take(n)?;
                    if b.len() > 8 {
                        return Err(format!("an integer of {} bytes at byte {at}", b.len()));
                    }
                    let mut v: i64 = 0;
                    for (i, &x) in b.iter().enumerate() {
                        v |= i64::from(x) << (8 * i);
                    }
                    // Two's complement: sign-extend from the top byte.
                    if let Some(&top) = b.last() {
                        if top & 0x80 != 0 && b.len() < 8 {
                            v -= 1i64 << (8 * b.len());
                        }
                    }
                    push(&mut nodes, &mut stack, Node::Int(v))
                }
                b'G' => {
                    input.le::<8>()?;
                    push(&mut nodes, &mut stack, Node::Float)
                }
                b'X' | 0x8c | 0x8d | b'U' | b'T' => {
                    let n = match op {
                        b'X' | b'T' => u64::from(u32::from_le_bytes(input.le()?)),
                        0x8c | b'U' => u64::from(input.u8()?),
                        _ => u64::from_le_bytes(input.le()?),
                    };
                    let s = text(input.take(n)?)?;
                    push(&mut nodes, &mut stack, Node::Str(s))
                }
                b'B' | b'C' | 0x8e => {
                    let n = match op {
                        b'B' => u64::from(u32::from_le_bytes(input.le()?)),
                        b'C' => u64::from(input.u8()?),
                        _ => u64::from_le_bytes(input.le()?),
                    };
                    input.take(n)?;
                    push(&mut nodes, &mut stack, Node::Bytes)
                }
                b'}' => push(&mut nodes, &mut stack, Node::Dict(Vec::new())),
                b']' => push(&mut nodes, &mut stack, Node::List(Vec::new())),
                b')' => push(&mut nodes, &mut stack, Node::Tuple(Vec::new())),
                b't' | b'l' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    let n = if op == b't' {
                        Node::Tuple(items)
                    } else {
                        Node::List(items)
                    };
                    push(&mut nodes, &mut stack, n)
                }
                b'd' => {
                    let items = pop_mark(&mut stack, &mut marks)?;
                    if items.len() % 2 != 0 {
                        return Err(format!("DICT with an odd number of items at byte {at}"));
                    }
                    let pairs = items.chunks(2).map(|p| (p[0], p[1])).collect();
                    push(&mut nodes, &mut stack, Node::Dict(pairs))
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(pop(&mut stack, &marks)?);
                    }
                    items.reverse();
                    push(&mut nodes, &mut stack, Node::Tuple(items))
                }
                b'a' | b'e' => {
                    let items = if op == b'a' {
                        vec![pop(&mut stack, &marks)?]
                    } else {
                        pop_mark(&mut stack, &mut marks)?
                    };
                    let target = *stack.last().ok_or("APPEND without a list")?;
                    match &mut nodes[target] {
                        Node::List(l) => l.extend(items),
                        other => return Err(format!("APPEND to {} at byte {at}", kind(other))),
                    }
                }
                b's' | b'u' => {
                    let items = if op == b's' {
                        let v = pop(&mut stack, &marks)?;
                        let k = pop(&mut stack, &marks)?;
                        vec![k, v]
                    } else {
                        pop_mark(&mut stack, &mut marks)?
                    };
                    if items.len() % 2 != 0 {
                        return Err(format!("SETITEMS with an odd number of items at byte {at}"));
                    }
                    let target = *stack.last().ok_or("SETITEM without a dict")?;
                    match &mut nodes[target] {
                        Node::Dict(d) => d.extend(items.chunks(2).map(|p| (p[0], p[1]))),
                        other => return Err(format!("SETITEM on {} at byte {at}", kind(other))),
                    }
                }
                b'c' => {
                    let module = input.line()?.to_owned();
                    let name = input.line()?.to_owned();
                    push(&mut nodes, &mut stack, Node::Global { module, name })
                }
                0x93 => {
                    let name = pop(&mut stack, &marks)?;
                    let module = pop(&mut stack, &marks)?;
                    let (Node::Str(module), Node::Str(name)) = (&nodes[module], &nodes[name])
                    else {
                        return Err(format!("STACK_GLOBAL without two strings at byte {at}"));
                    };
                    let g = Node::Global {
                        module: module.clone(),
                        name: name.clone(),
                    };
                    push(&mut nodes, &mut stack, g)
                }
                b'R' | 0x81 => {
                    let args = pop(&mut stack, &marks)?;
                    let callable = pop(&mut stack, &marks)?;
                    // `OrderedDict()`: a dict that SETITEMS fills.
                    let n = match &nodes[callable] {
                        Node::Global { module, name }
                            if module == "collections" && name == "OrderedDict" =>
                        {
                            Node::Dict(Vec::new())
                        }
                        _ => Node::Reduce { callable, args },
                    };
                    push(&mut nodes, &mut stack, n)
                }
                b'b' => {
                    let _state = pop(&mut stack, &marks)?;
                    let obj = *stack.last().ok_or("BUILD without an object")?;
                    // A dict keeps its items (an OrderedDict's `_metadata` state is not needed).
                    if !matches!(nodes[obj], Node::Dict(_)) {
                        pop(&mut stack, &marks)?;
                        push(&mut nodes, &mut stack, Node::Build { obj })
                    }
                }
                b'q' | b'r' | 0x94 => {
                    let key = match op {
                        b'q' => u64::from(input.u8()?),
                        b'r' => u64::from(u32::from_le_bytes(input.le()?)),
                        _ => memo.len() as u64,
                    };
                    let top = *stack.last().ok_or("PUT on an empty stack")?;
                    memo.insert(key, top);
                }
                b'h' | b'j' => {
                    let key = if op == b'h' {
                        u64::from(input.u8()?)
                    } else {
                        u64::from(u32::from_le_bytes(input.le()?))
                    };
                    let id = *memo
                        .get(&key)
                        .ok_or_else(|| format!("GET of memo {key}, never put, at byte {at}"))?;
                    stack.push(id);
                }
                b'Q' => {
                    let id = pop(&mut stack, &marks)?;
                    push(&mut nodes, &mut stack, Node::PersId(id))
                }
                other => {
                    return Err(format!(
                        "pickle opcode 0x{other:02x} at byte {at} is not supported"
                    ))
                }
            }
        }
    }

    /// The value under string key `key` of dict `id`.
    fn dict_get(&self, id: Id, key: &str) -> Option<Id> {
        let Node::Dict(items) = &self.nodes[id] else {
            return None;
        };
        items
            .iter()
            .find(|(k, _)| matches!(&self.nodes[*k], Node::Str(s) if s == key))
            .map(|&(_, v)| v)
    }

    /// The tensors of a state dict; entries that are not tensors are skipped.
    fn state_dict(&self, id: Id) -> std::result::Result<Vec<RawSpec>, String> {
        let Node::Dict(items) = &self.nodes[id] else {
            return Err(format!(
                "the state dict is {}, not a dict",
                kind(&self.nodes[id])
            ));
        };
        let mut out = Vec::new();
        for &(k, v) in items {
            let Node::Str(name) = &self.nodes[k] else {
                continue;
            };
            if let Some(spec) = self.tensor(name, v, 0)? {
                out.push(spec);
            }
        }
        Ok(out)
    }

    fn global(&self, id: Id) -> Option<(&str, &str)> {
        match &self.nodes[id] {
            Node::Global { module, name } => Some((module, name)),
            _ => None,
        }
    }

    fn tuple(&self, id: Id) -> Option<&[Id]> {
        match &self.nodes[id] {
            Node::Tuple(t) => Some(t),
            _ => None,
        }
    }

    fn int(&self, id: Id) -> Option<i64> {
        match self.nodes[id] {
            Node::Int(v) => Some(v),
            Node::Bool(b) => Some(b.into()),
            _ => None,
        }
    }

    fn ints(&self, id: Id) -> Option<Vec<i64>> {
        self.tuple(id)?.iter().map(|&i| self.int(i)).collect()
    }

    fn str(&self, id: Id) -> Option<&str> {
        match &self.nodes[id] {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The tensor value `id` describes, if it is one (`_rebuild_tensor_v2`, possibly wrapped in
    /// `_rebuild_parameter`, `_rebuild_from_type_v2` or BUILD).
    fn tensor(
        &self,
        name: &str,
        id: Id,
        depth: usize,
    ) -> std::result::Result<Option<RawSpec>, String> {
        if depth > 4 {
            return Ok(None);
        }
        let (callable, args) = match &self.nodes[id] {
            Node::Reduce { callable, args } => (*callable, *args),
            Node::Build { obj } => return self.tensor(name, *obj, depth + 1),
            _ => return Ok(None),
        };
        let bad = |what: &str| format!("tensor `{name}`: {what}");
        match self.global(callable) {
            Some(("torch._utils", "_rebuild_tensor_v2")) => {}
            Some(("torch._utils", "_rebuild_parameter")) => {
                let data = self.tuple(args).and_then(|a| a.first().copied());
                return match data {
                    Some(d) => self.tensor(name, d, depth + 1),
                    None => Err(bad("_rebuild_parameter without arguments")),
                };
            }
            Some(("torch._tensor", "_rebuild_from_type_v2")) => {
                // (func, new_type, args, state): func(*args).
                let a = self.tuple(args).unwrap_or(&[]);
                let (Some(&func), Some(&inner)) = (a.first(), a.get(2)) else {
                    return Err(bad("_rebuild_from_type_v2 with too few arguments"));
                };
                if self.global(func) != Some(("torch._utils", "_rebuild_tensor_v2")) {
                    return Ok(None);
                }
                return self.rebuild_tensor_v2(name, inner);
            }
            _ => return Ok(None),
        }
        self.rebuild_tensor_v2(name, args)
    }

    /// `_rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, ...)`.
    fn rebuild_tensor_v2(
        &self,
        name: &str,
        args: Id,
    ) -> std::result::Result<Option<RawSpec>, String> {
        let bad = |what: &str| format!("tensor `{name}`: {what}");
        let a = self
            .tuple(args)
            .ok_or_else(|| bad("arguments are not a tuple"))?;
        if a.len() < 4 {
            return Err(bad(
                "_rebuild_tensor_v2 needs storage, offset, size and stride",
            ));
        }
        let Node::PersId(pid) = self.nodes[a[0]] else {
            return Err(bad("the storage is not a persistent id"));
        };
        // ('storage', torch.<Type>Storage, key, location, numel)
        let p = self
            .tuple(pid)
            .ok_or_else(|| bad("the storage id is not a tuple"))?;
        if p.len() < 5 || self.str(p[0]) != Some("storage") {
            return Err(bad(
                "the storage id is not ('storage', type, key, location, size)",
            ));
        }
        let (_, class) = self
            .global(p[1])
            .ok_or_else(|| bad("the storage type is not a class"))?;
        let storage = self
            .str(p[2])
            .ok_or_else(|| bad("the storage key is not a string"))?;
        let storage_numel = self
            .int(p[4])
            .ok_or_else(|| bad("the storage size is not an integer"))?;
        Ok(Some(RawSpec {
            name: name.to_owned(),
            storage: storage.to_owned(),
            storage_class: class.to_owned(),
            storage_numel,
            offset: self
                .int(a[1])
                .ok_or_else(|| bad("the offset is not an integer"))?,
            shape: self
                .ints(a[2])
                .ok_or_else(|| bad("the size is not a tuple of integers"))?,
            stride: self
                .ints(a[3])
                .ok_or_else(|| bad("the stride is not a tuple of integers"))?,
        }))
    }
}

fn kind(n: &Node) -> &'static str {
    match n {
        Node::None => "None",
        Node::Bool(_) => "a bool",
        Node::Int(_) => "an int",
        Node::Float => "a float",
        Node::Str(_) => "a string",
        Node::Bytes => "bytes",
        Node::Tuple(_) => "a tuple",
        Node::List(_) => "a list",
        Node::Dict(_) => "a dict",
        Node::Global { .. } => "a class",
        Node::Reduce { .. } => "an object",
        Node::Build { .. } => "an object",
        Node::PersId(_) => "a persistent id",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `torch.save`-style archive: `data.pkl` with `pickle`, plus stored entries.
    pub(crate) fn archive(pickle: &[u8], entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        w.start_file("archive/data.pkl", opts).unwrap();
        std::io::Write::write_all(&mut w, pickle).unwrap();
        for (name, data) in entries {
            w.start_file(format!("archive/{name}"), opts).unwrap();
            std::io::Write::write_all(&mut w, data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// `{"model": {name: _rebuild_tensor_v2(('storage', FloatStorage, '0', 'cpu', numel), off, size, stride, False, OrderedDict())}}`.
    fn state_dict_pickle(name: &str, numel: u8, offset: u8, size: &[u8], stride: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, 2, b'}', b'X'];
        p.extend((5u32).to_le_bytes());
        p.extend(b"model");
        p.push(b'}');
        p.push(b'X');
        p.extend((name.len() as u32).to_le_bytes());
        p.extend(name.as_bytes());
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n(");
        p.extend(b"(X");
        p.extend(7u32.to_le_bytes());
        p.extend(b"storage");
        p.extend(b"ctorch\nFloatStorage\nX");
        p.extend(1u32.to_le_bytes());
        p.extend(b"0X");
        p.extend(3u32.to_le_bytes());
        p.extend(b"cpuK");
        p.push(numel);
        p.extend(b"tQK");
        p.push(offset);
        p.push(b'(');
        for &d in size {
            p.extend([b'K', d]);
        }
        p.extend(b"t(");
        for &s in stride {
            p.extend([b'K', s]);
        }
        p.extend(b"t\x89ccollections\nOrderedDict\n)RtRs");
        p.extend(b"s.");
        p
    }

    fn floats(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_a_small_state_dict() {
        let data = floats(&[1., 2., 3., 4., 5., 6.]);
        let zip = archive(
            &state_dict_pickle("w", 6, 0, &[2, 3], &[3, 1]),
            &[("data/0", &data)],
        );
        let t = read_tensors(std::io::Cursor::new(zip), Some("model"), Path::new("m.pt")).unwrap();
        assert_eq!(t[0].0, "w");
        assert_eq!(
            t[0].1.to_vec2::<f32>().unwrap(),
            [[1., 2., 3.], [4., 5., 6.]]
        );
        // A transposed view (strides 1, 2) with an offset.
        let zip = archive(
            &state_dict_pickle("t", 6, 1, &[2, 2], &[1, 2]),
            &[("data/0", &data)],
        );
        let t = read_tensors(std::io::Cursor::new(zip), Some("model"), Path::new("m.pt")).unwrap();
        assert_eq!(t[0].1.to_vec2::<f32>().unwrap(), [[2., 4.], [3., 5.]]);
    }

    #[test]
    fn bounds_and_malformed_input_are_errors() {
        let read = |pickle: &[u8], data: &[u8]| {
            read_tensors(
                std::io::Cursor::new(archive(pickle, &[("data/0", data)])),
                Some("model"),
                Path::new("m.pt"),
            )
        };
        let data = floats(&[0.; 6]);
        // A view past its storage.
        let e = read(&state_dict_pickle("w", 6, 1, &[2, 3], &[3, 1]), &data).unwrap_err();
        assert!(
            e.to_string().contains("read element 6 of a storage of 6"),
            "{e}"
        );
        // A storage entry shorter than the pickle says.
        let e = read(&state_dict_pickle("w", 6, 0, &[2, 3], &[3, 1]), &data[..20]).unwrap_err();
        assert!(e.to_string().contains("holds 20 bytes"), "{e}");
        // Rank 9.
        let e = read(&state_dict_pickle("w", 6, 0, &[1; 9], &[1; 9]), &data).unwrap_err();
        assert!(
            matches!(&e, Error::Limit(l) if l.value == 9 && l.limit == MAX_TENSOR_RANK as u64),
            "{e}"
        );
        // 255^4 elements: over the element bound, refused before any storage is read.
        let e = read(&state_dict_pickle("w", 6, 0, &[255; 4], &[1; 4]), &data).unwrap_err();
        assert!(
            matches!(&e, Error::Limit(l) if l.limit == MAX_TENSOR_ELEMENTS as u64),
            "{e}"
        );
        // A 4 GiB string length in a 30-byte pickle: an error, not a 4 GiB allocation.
        let mut p = vec![0x80, 2, b'X'];
        p.extend(u32::MAX.to_le_bytes());
        p.extend(b"abc.");
        let e = read(&p, &data).unwrap_err();
        assert!(e.to_string().contains("runs past the end"), "{e}");
        // Truncated, empty stack, unknown opcode, no `model` key.
        for bad in [&b"\x80\x02}"[..], b".", b"\x80\x02\xff.", b"}."] {
            assert!(read(bad, &data).is_err(), "{bad:?}");
        }
    }
}

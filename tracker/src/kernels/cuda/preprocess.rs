//! Preprocessing on the GPU: the frame's bytes go up as they are (RGB, RGBA/RGBx, BGR, BGRA/BGRx,
//! gray, NV12 or I420, with any row strides; planes kept apart by the caller go up one after the
//! other) and four small kernels turn them into the model input
//! `[1, 3, S, S]` f32 in device memory:
//!
//! 1. conversion to packed RGB8 (BT.601 limited range for YUV, the same integer formula as the
//!    host);
//! 2. torchvision's antialiased bilinear resize on uint8, width pass, with the very int16 taps
//!    and precision the CPU path computes ([`crate::frame::preprocess`]'s `axis`), rounding back to uint8;
//! 3. the height pass, likewise (a pass whose size does not change is skipped, as torch does);
//! 4. `(v - 255 mean) / (255 std)` in f32 with IEEE division, channel planes out.
//!
//! Integer arithmetic in 1-3 and the same two f32 operations in 4 make the result bit-identical
//! to the CPU path (tested in `tests/cuda_parity.rs`). The upload is the frame (e.g. 6 MB for
//! 1080p RGB, 3 MB for NV12) instead of the 12 MB f32 tensor at 1024; the tap tables are
//! uploaded once per (input size, output size) and device, and cached.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, DeviceId, WrapErr};
use candle_core::{CpuStorage, CudaStorage, CustomOp3, Device, Layout, Shape, Tensor};

use crate::error::{Error, Result};
use crate::frame::taps::{axis, MEAN, STD};
use crate::frame::{Frame, PixelFormat};

/// The kernels, compiled with NVRTC (see [`super::ptx`]). Indices are int: frames are limited to
/// 2^31 bytes ([`Frame::validate`]).
pub(crate) const SOURCE: &str = r#"
__device__ __forceinline__ unsigned char clamp_u8(int v) {
    return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

__device__ __forceinline__ void yuv(int y, int u, int v, unsigned char* o) {
    int c = y - 16, d = u - 128, e = v - 128;
    o[0] = clamp_u8((298 * c + 409 * e + 128) >> 8);
    o[1] = clamp_u8((298 * c - 100 * d - 208 * e + 128) >> 8);
    o[2] = clamp_u8((298 * c + 516 * d + 128) >> 8);
}

// Any supported layout -> packed RGB8, one thread per pixel. Plane 0 starts at `src`; the
// chroma planes at `off1` / `off2` with their own strides.
extern "C" __global__ void edgetam_to_rgb(const unsigned char* src, unsigned char* dst,
                                          int w, int h, int stride, int layout,
                                          int off1, int stride1, int off2, int stride2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= w * h) return;
    int y = i / w, x = i - y * w;
    unsigned char* o = dst + 3 * i;
    const unsigned char* p;
    switch (layout) {
    case 0: p = src + y * stride + 3 * x; o[0] = p[0]; o[1] = p[1]; o[2] = p[2]; break;
    case 1: p = src + y * stride + 4 * x; o[0] = p[0]; o[1] = p[1]; o[2] = p[2]; break;
    case 2: p = src + y * stride + 3 * x; o[0] = p[2]; o[1] = p[1]; o[2] = p[0]; break;
    case 3: p = src + y * stride + 4 * x; o[0] = p[2]; o[1] = p[1]; o[2] = p[0]; break;
    case 4: o[0] = o[1] = o[2] = src[y * stride + x]; break;
    case 5: {
        const unsigned char* uv = src + off1 + (y / 2) * stride1 + (x / 2) * 2;
        yuv(src[y * stride + x], uv[0], uv[1], o);
        break;
    }
    default: {
        int u = src[off1 + (y / 2) * stride1 + x / 2];
        int v = src[off2 + (y / 2) * stride2 + x / 2];
        yuv(src[y * stride + x], u, v, o);
        break;
    }
    }
}

// Fixed-point taps of one axis: first source index [n], tap count [n], taps [n][max_taps].
__device__ __forceinline__ int resample(const unsigned char* s, int step, const int* table,
                                        int n, int o, int max_taps, int precision) {
    int first = table[o];
    int count = table[n + o];
    const int* taps = table + 2 * n + o * max_taps;
    int acc = precision > 0 ? 1 << (precision - 1) : 0;
    s += first * step;
    for (int k = 0; k < count; ++k) acc += (int)s[k * step] * taps[k];
    return acc >> precision;
}

// Width pass: [h][in_w][3] -> [h][out_w][3].
extern "C" __global__ void edgetam_resize_w(const unsigned char* src, unsigned char* dst,
                                            const int* table, int in_w, int h, int out_w,
                                            int max_taps, int precision) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= h * out_w * 3) return;
    int c = i % 3, x = (i / 3) % out_w, y = i / (3 * out_w);
    dst[i] = clamp_u8(resample(src + y * in_w * 3 + c, 3, table, out_w, x, max_taps, precision));
}

// Height pass: [in_h][row] -> [out_h][row], row = width * 3 bytes.
extern "C" __global__ void edgetam_resize_h(const unsigned char* src, unsigned char* dst,
                                            const int* table, int row, int out_h,
                                            int max_taps, int precision) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= out_h * row) return;
    int y = i / row, j = i - y * row;
    dst[i] = clamp_u8(resample(src + j, row, table, out_h, y, max_taps, precision));
}

// [S][S][3] uint8 -> [3][S][S] f32: (v - mean) / std, IEEE f32 like the host table.
extern "C" __global__ void edgetam_normalize(const unsigned char* src, float* dst, int s,
                                             float m0, float m1, float m2,
                                             float d0, float d1, float d2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int plane = s * s;
    if (i >= 3 * plane) return;
    int c = i / plane, p = i - c * plane;
    float m = c == 0 ? m0 : (c == 1 ? m1 : m2);
    float d = c == 0 ? d0 : (c == 1 ? d1 : d2);
    dst[i] = __fdiv_rn(__fsub_rn((float)src[3 * p + c], m), d);
}
"#;

/// One axis's taps on the device (`None` when the pass is skipped).
struct AxisTable {
    table: Tensor,
    max_taps: i32,
    precision: i32,
}

type TableKey = (DeviceId, usize, usize);

/// Tap tables per device and (input, output) size: frame sizes rarely change, so the upload
/// happens once per stream.
fn axis_table(dev: &Device, id: DeviceId, input: usize, output: usize) -> Result<Arc<AxisTable>> {
    static CACHE: OnceLock<Mutex<HashMap<TableKey, Arc<AxisTable>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = (id, input, output);
    if let Some(t) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(t);
    }
    let ax = axis(input, output);
    let n = ax.first.len();
    let max_taps = ax.taps.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut data = Vec::with_capacity(n * (2 + max_taps));
    data.extend(ax.first.iter().map(|&f| f as i32));
    data.extend(ax.taps.iter().map(|t| t.len() as i32));
    for taps in &ax.taps {
        data.extend_from_slice(taps);
        data.extend(std::iter::repeat_n(0, max_taps - taps.len()));
    }
    let len = data.len();
    let table = Arc::new(AxisTable {
        table: Tensor::from_vec(data, len, dev)?,
        max_taps: max_taps as i32,
        precision: ax.precision as i32,
    });
    if let Ok(mut c) = cache.lock() {
        // A handful of sizes at most in practice; never let it grow without bound.
        if c.len() >= 64 {
            c.clear();
        }
        c.insert(key, table.clone());
    }
    Ok(table)
}

/// `[1, 3, S, S]` f32 on the CUDA device `device` from a frame in host memory: one upload of the
/// frame's bytes, then everything on the device.
pub fn preprocess(frame: &Frame, image_size: usize, device: &Device) -> Result<Tensor> {
    let Device::Cuda(cuda) = device else {
        return Err(Error::InvalidDevice(format!(
            "{device:?}: the GPU preprocessing needs a CUDA device"
        )));
    };
    let needed = frame.validate()?;
    let s = image_size;
    if s == 0 || s > 16384 {
        return Err(Error::InvalidImage(format!(
            "cannot preprocess to {s}x{s}: the size must be in 1..=16384"
        )));
    }
    let (w, h) = (frame.width(), frame.height());
    let (bytes, planes) = upload_layout(frame, needed)?;
    let upload = Tensor::from_slice(&bytes, bytes.len(), device)?;
    crate::instrument::transfer::record_upload(bytes.len());
    let id = cuda.id();
    let wt = (s != w).then(|| axis_table(device, id, w, s)).transpose()?;
    let ht = (s != h).then(|| axis_table(device, id, h, s)).transpose()?;
    // Unused table inputs are the frame itself (never read).
    let wt_t = wt.as_ref().map_or(&upload, |t| &t.table);
    let ht_t = ht.as_ref().map_or(&upload, |t| &t.table);
    let op = PreprocessOp {
        width: w,
        height: h,
        planes,
        format: frame.format(),
        size: s,
        width_pass: wt.as_ref().map(|t| (t.max_taps, t.precision)),
        height_pass: ht.as_ref().map(|t| (t.max_taps, t.precision)),
    };
    Ok(upload.apply_op3_no_bwd(wt_t, ht_t, &op)?)
}

/// The frame's bytes as one upload (borrowed for a one-buffer frame, the planes back to back
/// otherwise) and each plane's `(offset, stride)` in it.
#[allow(clippy::type_complexity)]
fn upload_layout<'f>(
    frame: &'f Frame<'_>,
    needed: usize,
) -> Result<(std::borrow::Cow<'f, [u8]>, [(usize, usize); 3])> {
    let mut planes = [(0usize, 0usize); 3];
    if let Some((data, layout)) = frame.one_buffer() {
        for (slot, l) in planes.iter_mut().zip(layout) {
            *slot = l;
        }
        return Ok((std::borrow::Cow::Borrowed(&data[..needed]), planes));
    }
    let format = frame.format();
    let mut bytes = Vec::with_capacity(needed);
    for (i, slot) in planes.iter_mut().enumerate().take(format.planes()) {
        let missing = || Error::InvalidImage(format!("frame has no plane {i}"));
        let p = frame.plane(i).ok_or_else(missing)?;
        let (row, rows) = format
            .plane_size(i, frame.width(), frame.height())
            .ok_or_else(missing)?;
        let span = p.stride * rows.saturating_sub(1) + row;
        *slot = (bytes.len(), p.stride);
        bytes.extend_from_slice(&p.data[..span]);
    }
    Ok((std::borrow::Cow::Owned(bytes), planes))
}

struct PreprocessOp {
    width: usize,
    height: usize,
    /// `(offset, stride)` of each plane in the upload.
    planes: [(usize, usize); 3],
    format: PixelFormat,
    size: usize,
    /// `(max_taps, precision)` of each resize pass that runs.
    width_pass: Option<(i32, i32)>,
    height_pass: Option<(i32, i32)>,
}

/// The code `edgetam_to_rgb` switches on.
fn layout_code(format: PixelFormat) -> i32 {
    match format {
        PixelFormat::Rgb8 => 0,
        PixelFormat::Rgba8 => 1,
        PixelFormat::Bgr8 => 2,
        PixelFormat::Bgra8 => 3,
        PixelFormat::Gray8 => 4,
        PixelFormat::Nv12 => 5,
        PixelFormat::I420 => 6,
    }
}

fn cfg(n: usize) -> LaunchConfig {
    let block = 256u32;
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(block), 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn i32_of(v: usize) -> candle_core::Result<i32> {
    i32::try_from(v).map_err(|_| candle_core::Error::Msg(format!("{v} does not fit in i32")))
}

fn view_i32<'a>(s: &'a CudaStorage, l: &Layout) -> candle_core::Result<CudaView<'a, i32>> {
    Ok(s.as_cuda_slice::<i32>()?.slice(l.start_offset()..))
}

impl PreprocessOp {
    fn run(
        &self,
        dev: &CudaDevice,
        src: &CudaView<'_, u8>,
        wt: Option<CudaView<'_, i32>>,
        ht: Option<CudaView<'_, i32>>,
    ) -> candle_core::Result<CudaSlice<f32>> {
        let ptx = super::ptx()?;
        let (w, h, s) = (self.width, self.height, self.size);
        let (wi, hi, si) = (i32_of(w)?, i32_of(h)?, i32_of(s)?);
        let stride = i32_of(self.planes[0].1)?;
        let (off1, stride1) = (i32_of(self.planes[1].0)?, i32_of(self.planes[1].1)?);
        let (off2, stride2) = (i32_of(self.planes[2].0)?, i32_of(self.planes[2].1)?);
        let layout = layout_code(self.format);

        // 1. Packed RGB8.
        // SAFETY: every element is written by the kernel below before it is read.
        let mut rgb = unsafe { dev.alloc::<u8>(w * h * 3)? };
        let func = dev.get_or_load_custom_func("edgetam_to_rgb", super::MODULE, ptx)?;
        let mut b = func.builder();
        b.arg(src)
            .arg(&mut rgb)
            .arg(&wi)
            .arg(&hi)
            .arg(&stride)
            .arg(&layout)
            .arg(&off1)
            .arg(&stride1)
            .arg(&off2)
            .arg(&stride2);
        // SAFETY: argument types and count match the kernel's signature; the buffers hold the
        // sizes it indexes (validated frame, w*h*3 output).
        unsafe { b.launch(cfg(w * h)) }.w()?;

        // 2. Width pass.
        let rgb = match (&wt, self.width_pass) {
            (Some(table), Some((max_taps, precision))) => {
                // SAFETY: fully written by the kernel.
                let mut out = unsafe { dev.alloc::<u8>(h * s * 3)? };
                let func = dev.get_or_load_custom_func("edgetam_resize_w", super::MODULE, ptx)?;
                let mut b = func.builder();
                b.arg(&rgb)
                    .arg(&mut out)
                    .arg(table)
                    .arg(&wi)
                    .arg(&hi)
                    .arg(&si);
                b.arg(&max_taps).arg(&precision);
                // SAFETY: as above; the table has out_w * (2 + max_taps) entries.
                unsafe { b.launch(cfg(h * s * 3)) }.w()?;
                out
            }
            _ => rgb,
        };
        let row_w = if self.width_pass.is_some() { s } else { w };

        // 3. Height pass.
        let rgb = match (&ht, self.height_pass) {
            (Some(table), Some((max_taps, precision))) => {
                // SAFETY: fully written by the kernel.
                let mut out = unsafe { dev.alloc::<u8>(s * row_w * 3)? };
                let func = dev.get_or_load_custom_func("edgetam_resize_h", super::MODULE, ptx)?;
                let row = i32_of(row_w * 3)?;
                let mut b = func.builder();
                b.arg(&rgb).arg(&mut out).arg(table).arg(&row).arg(&si);
                b.arg(&max_taps).arg(&precision);
                // SAFETY: as above; the table has out_h * (2 + max_taps) entries.
                unsafe { b.launch(cfg(s * row_w * 3)) }.w()?;
                out
            }
            _ => rgb,
        };

        // 4. Normalise into channel planes.
        // SAFETY: fully written by the kernel.
        let mut out = unsafe { dev.alloc::<f32>(3 * s * s)? };
        let func = dev.get_or_load_custom_func("edgetam_normalize", super::MODULE, ptx)?;
        let m: [f32; 3] = std::array::from_fn(|c| MEAN[c] * 255.0);
        let d: [f32; 3] = std::array::from_fn(|c| STD[c] * 255.0);
        let mut b = func.builder();
        b.arg(&rgb).arg(&mut out).arg(&si);
        b.arg(&m[0])
            .arg(&m[1])
            .arg(&m[2])
            .arg(&d[0])
            .arg(&d[1])
            .arg(&d[2]);
        // SAFETY: as above; `rgb` is s*s*3 bytes here (both passes ran or the frame is s x s).
        unsafe { b.launch(cfg(3 * s * s)) }.w()?;
        Ok(out)
    }
}

impl CustomOp3 for PreprocessOp {
    fn name(&self) -> &'static str {
        "edgetam-preprocess"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        candle_core::bail!("edgetam-preprocess: the CPU path is preprocess::preprocess_frame")
    }

    fn cuda_fwd(
        &self,
        frame: &CudaStorage,
        frame_l: &Layout,
        wt: &CudaStorage,
        wt_l: &Layout,
        ht: &CudaStorage,
        ht_l: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = frame.device.clone();
        let src = frame.as_cuda_slice::<u8>()?.slice(frame_l.start_offset()..);
        let wt = self.width_pass.map(|_| view_i32(wt, wt_l)).transpose()?;
        let ht = self.height_pass.map(|_| view_i32(ht, ht_l)).transpose()?;
        let out = self.run(&dev, &src, wt, ht)?;
        let s = self.size;
        Ok((
            CudaStorage::wrap_cuda_slice(out, dev),
            Shape::from((1, 3, s, s)),
        ))
    }
}

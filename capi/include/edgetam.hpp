// edgetam.hpp: a header-only C++17 wrapper over edgetam.h.
//
//   c++ -std=c++17 app.cpp $(pkg-config --cflags --libs edgetam)
//
// - RAII handles, move-only: edgetam::Model, edgetam::Tracker, edgetam::Result free their C
//   handle in the destructor. A Tracker keeps its model alive (the Model may go first).
// - Errors are exceptions: every failed call throws edgetam::Error, carrying the status code
//   and the library's message (edgetam_last_error of the calling thread).
// - No dangling views: every Object shares ownership of the masks of the Result it came from
//   (a reference count, no copy), so `for (auto &o : tracker.track(frame).objects()) use(o.mask)`,
//   `tracker.track(frame).at(0).mask` and `find(id)` on a temporary Result are safe: Object::mask
//   lives as long as the Object (or any copy of it). edgetam::View<T> (the std::span C++17 lacks)
//   is only for arguments; it cannot be made from a temporary vector or array (compile error).
// - Threads: as in edgetam.h. A Model and a Result may be used by several threads at once; a
//   Tracker by one thread at a time.
#ifndef EDGETAM_HPP
#define EDGETAM_HPP

#include <edgetam.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace edgetam {

/// A failed call: its status code and the library's message.
class Error : public std::runtime_error {
public:
    Error(EdgetamStatus status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    EdgetamStatus status() const noexcept { return status_; }
    /// The code's name, e.g. "EDGETAM_STATUS_INVALID_FRAME".
    const char *status_name() const noexcept { return edgetam_status_name(status_); }

private:
    EdgetamStatus status_;
};

namespace detail {
inline void check(EdgetamStatus status) {
    if (status != EDGETAM_STATUS_OK) throw Error(status, edgetam_last_error());
}

/// A handle owned alone and freed by `Free` (NULL is fine to free): move-only, a move leaves
/// the source empty (construction) or holding the target's old handle (assignment, freed with
/// the source). What Model and Tracker hold.
template <class T, void (*Free)(T *)>
class Owned {
public:
    Owned() = default;
    explicit Owned(T *handle) noexcept : handle_(handle) {}
    Owned(Owned &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Owned &operator=(Owned &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    ~Owned() { Free(handle_); }

    T *get() const noexcept { return handle_; }
    /// Where a constructor call writes the new handle.
    T **out() noexcept { return &handle_; }

private:
    T *handle_ = nullptr;
};
}  // namespace detail

/// A borrowed run of `size` values at `data` (the std::span of C++20, read-only). Made from a
/// vector or array that outlives it: from a temporary one it does not compile (it would dangle
/// once the statement ends); pass a temporary vector straight to the call taking it instead.
template <class T>
struct View {
    const T *data = nullptr;
    std::size_t size = 0;

    View() = default;
    View(const T *d, std::size_t n) : data(d), size(n) {}
    View(const std::vector<T> &v) : data(v.data()), size(v.size()) {}
    View(std::vector<T> &&) = delete;
    template <std::size_t N>
    View(const std::array<T, N> &a) : data(a.data()), size(N) {}
    template <std::size_t N>
    View(std::array<T, N> &&) = delete;

    const T *begin() const noexcept { return data; }
    const T *end() const noexcept { return data + size; }
    const T &operator[](std::size_t i) const noexcept { return data[i]; }
    bool empty() const noexcept { return size == 0; }
};

/// The library's version, e.g. "0.1.0" (the header's is EDGETAM_VERSION_STRING).
inline std::string version() { return edgetam_version(); }

/// Throws Error (EDGETAM_STATUS_INVALID_ARGUMENT) when the loaded libedgetam cannot serve
/// programs built against this header (edgetam_version_compatible: another major version, or
/// before 1.0 another minor). Model::load calls it first.
inline void check_version() {
    if (!edgetam_version_compatible())
        throw Error(EDGETAM_STATUS_INVALID_ARGUMENT,
                    std::string("libedgetam ") + edgetam_version() +
                        " is loaded, but this program was built against edgetam.h " +
                        EDGETAM_VERSION_STRING + " (0.x: the minor versions must match)");
}
/// The CPU path of models on "cpu" (see Model::backend for a given model).
inline std::string backend() { return edgetam_backend(); }

enum class PixelFormat : int32_t {
    Rgb8 = EDGETAM_PIXEL_FORMAT_RGB8,
    Rgba8 = EDGETAM_PIXEL_FORMAT_RGBA8,
    Bgr8 = EDGETAM_PIXEL_FORMAT_BGR8,
    Bgra8 = EDGETAM_PIXEL_FORMAT_BGRA8,
    Gray8 = EDGETAM_PIXEL_FORMAT_GRAY8,
    Nv12 = EDGETAM_PIXEL_FORMAT_NV12,
    I420 = EDGETAM_PIXEL_FORMAT_I420,
};

/// A frame borrowed from the caller: the pixels must stay valid during the track call only.
struct Frame {
    EdgetamFrame raw = blank();

    /// A zeroed frame with its `size` set (what every EdgetamFrame the library reads needs).
    static EdgetamFrame blank() {
        EdgetamFrame f{};
        f.size = sizeof f;
        return f;
    }

    /// A one-plane frame (packed RGB/BGR(A) or gray); `stride` 0 means tightly packed rows.
    static Frame packed(PixelFormat format, uint32_t width, uint32_t height, const uint8_t *data,
                        std::size_t stride = 0) {
        std::size_t bpp = format == PixelFormat::Gray8                                  ? 1
                          : (format == PixelFormat::Rgba8 || format == PixelFormat::Bgra8) ? 4
                                                                                          : 3;
        return with_planes(static_cast<int32_t>(format), width, height,
                           EdgetamPlane{data, stride ? stride : bpp * width});
    }
    /// NV12: a luma plane and an interleaved chroma plane, each with its stride.
    static Frame nv12(uint32_t width, uint32_t height, EdgetamPlane y, EdgetamPlane uv) {
        return with_planes(EDGETAM_PIXEL_FORMAT_NV12, width, height, y, uv);
    }
    /// I420: Y, U and V planes, each with its stride.
    static Frame i420(uint32_t width, uint32_t height, EdgetamPlane y, EdgetamPlane u,
                      EdgetamPlane v) {
        return with_planes(EDGETAM_PIXEL_FORMAT_I420, width, height, y, u, v);
    }

private:
    /// A frame of `format`, `width` x `height`, with the planes its format uses (the others
    /// left zero).
    static Frame with_planes(int32_t format, uint32_t width, uint32_t height, EdgetamPlane p0,
                             EdgetamPlane p1 = {}, EdgetamPlane p2 = {}) {
        Frame f;
        f.raw.format = format;
        f.raw.width = width;
        f.raw.height = height;
        f.raw.planes[0] = p0;
        f.raw.planes[1] = p1;
        f.raw.planes[2] = p2;
        return f;
    }
};

struct ModelOptions {
    std::string device = "cpu";   ///< "cpu", "cuda" or "cuda:N"
    std::string precision = "f32";  ///< "f32" or "bf16" (AVX512-BF16 CPUs; elsewhere load throws)
    uint32_t input_size = 0;       ///< 0: the checkpoint's; else a multiple of 256, 256..2048
};

/// A loaded model (move-only). Shared by trackers: they keep it alive.
class Model {
public:
    /// Loads a folder, an edgetam.pt file or a hub repository id (see edgetam_model_load).
    static Model load(const std::string &source, const ModelOptions &options = {}) {
        check_version();
        EdgetamModelOptions raw{};
        raw.size = sizeof raw;
        raw.device = options.device.c_str();
        raw.precision = options.precision.c_str();
        raw.input_size = options.input_size;
        EdgetamModel *handle = nullptr;
        detail::check(edgetam_model_load(source.c_str(), &raw, &handle));
        return Model(handle);
    }

    /// "cpu avx512" (the CPU and its kernels' instruction set) or "cuda:N".
    std::string backend() const {
        const char *out = nullptr;
        detail::check(edgetam_model_backend(handle_.get(), &out));
        return out;
    }
    uint32_t input_size() const {
        uint32_t out = 0;
        detail::check(edgetam_model_input_size(handle_.get(), &out));
        return out;
    }
    /// "f32" or "bf16": what the load asked for (a bf16 request that cannot run throws Error
    /// with EDGETAM_STATUS_PRECISION_UNAVAILABLE instead of loading f32).
    std::string precision() const {
        const char *out = nullptr;
        detail::check(edgetam_model_precision(handle_.get(), &out));
        return out;
    }
    const EdgetamModel *get() const noexcept { return handle_.get(); }

private:
    explicit Model(EdgetamModel *handle) : handle_(handle) {}
    detail::Owned<EdgetamModel, edgetam_model_free> handle_;
};

class Result;

/// One object on one frame. `mask` stays valid as long as this Object (or a copy) lives: the
/// Object shares ownership of its Result's masks, even when that Result was a temporary.
struct Object {
    uint32_t id = 0;
    float score = 0;  ///< object-score logit; visible when > 0
    bool visible = false;
    std::optional<std::array<uint32_t, 4>> box;  ///< x0, y0, x1, y1 inclusive; none if empty
    uint64_t area = 0;
    float iou = 0;
    bool prompted = false;
    uint32_t width = 0, height = 0;
    View<uint8_t> mask;  ///< width * height bytes, 0/1, row-major; lives as long as this Object

private:
    friend class Result;
    /// The result handle `mask` points into, kept alive by every Object taken from it.
    std::shared_ptr<const EdgetamResult> owner_;

    static Object from(const EdgetamObject &o, std::shared_ptr<const EdgetamResult> owner) {
        Object out;
        out.owner_ = std::move(owner);
        out.id = o.id;
        out.score = o.score;
        out.visible = o.visible != 0;
        if (o.has_box) out.box = std::array<uint32_t, 4>{o.bbox[0], o.bbox[1], o.bbox[2], o.bbox[3]};
        out.area = o.area;
        out.iou = o.iou;
        out.prompted = o.prompted != 0;
        out.width = o.mask_width;
        out.height = o.mask_height;
        out.mask = View<uint8_t>(o.mask, static_cast<std::size_t>(o.mask_width) * o.mask_height);
        return out;
    }
};

/// One frame's results (move-only). Its masks are freed when the Result and every Object taken
/// from it are gone (the Objects share them, so a temporary Result's Objects stay valid).
class Result {
public:
    Result(Result &&other) noexcept = default;
    Result &operator=(Result &&other) noexcept = default;
    Result(const Result &) = delete;
    Result &operator=(const Result &) = delete;
    ~Result() = default;

    uint64_t frame_index() const {
        uint64_t index = 0;
        detail::check(edgetam_result_frame(handle_.get(), &index, nullptr, nullptr));
        return index;
    }
    std::pair<uint32_t, uint32_t> size() const {
        uint32_t w = 0, h = 0;
        detail::check(edgetam_result_frame(handle_.get(), nullptr, &w, &h));
        return {w, h};
    }
    std::size_t count() const {
        std::size_t n = 0;
        detail::check(edgetam_result_count(handle_.get(), &n));
        return n;
    }
    /// The index-th object; throws Error (EDGETAM_STATUS_INVALID_ARGUMENT) past the end.
    Object at(std::size_t index) const {
        EdgetamObject o{};
        o.size = sizeof o;
        detail::check(edgetam_result_object(handle_.get(), index, &o));
        return Object::from(o, handle_);
    }
    /// Every object, in the order they were first prompted.
    std::vector<Object> objects() const {
        std::vector<Object> out;
        std::size_t n = count();
        out.reserve(n);
        for (std::size_t i = 0; i < n; i++) out.push_back(at(i));
        return out;
    }
    /// The object with this id, or none.
    std::optional<Object> find(uint32_t id) const {
        EdgetamObject o{};
        o.size = sizeof o;
        EdgetamStatus s = edgetam_result_find(handle_.get(), id, &o);
        if (s == EDGETAM_STATUS_UNKNOWN_OBJECT) return std::nullopt;
        detail::check(s);
        return Object::from(o, handle_);
    }
    /// Copies object `id`'s mask into `dst` (`len` bytes, rows `stride` bytes apart).
    void copy_mask(uint32_t id, uint8_t *dst, std::size_t len, std::size_t stride) const {
        detail::check(edgetam_result_copy_mask(handle_.get(), id, dst, len, stride));
    }
    const EdgetamResult *get() const noexcept { return handle_.get(); }

private:
    friend class Tracker;
    /// Takes the handle; should the control block's allocation throw, shared_ptr frees it.
    explicit Result(EdgetamResult *handle) : handle_(handle, edgetam_result_free) {}
    std::shared_ptr<const EdgetamResult> handle_;
};

/// One video stream's tracker (move-only). Use from one thread at a time.
class Tracker {
public:
    /// The frame argument of the prompt calls meaning "the next frame to be tracked".
    static constexpr uint64_t next_frame = EDGETAM_NEXT_FRAME;

    explicit Tracker(const Model &model) {
        detail::check(edgetam_tracker_new(model.get(), handle_.out()));
    }
    void add_box(uint32_t object_id, EdgetamBox box, uint64_t frame = next_frame) {
        detail::check(edgetam_tracker_add_box(handle_.get(), object_id, frame, box));
    }
    /// Points (label 1 positive, 0 negative), with an optional box.
    void add_points(uint32_t object_id, View<EdgetamPoint> points, uint64_t frame = next_frame,
                    std::optional<EdgetamBox> box = std::nullopt) {
        detail::check(edgetam_tracker_add_points(handle_.get(), object_id, frame,
                                                 box ? &*box : nullptr, points.data, points.size));
    }
    /// The same from a vector, temporaries included (`add_points(1, {{x, y, 1}})`): the points
    /// are read during the call only.
    void add_points(uint32_t object_id, const std::vector<EdgetamPoint> &points,
                    uint64_t frame = next_frame, std::optional<EdgetamBox> box = std::nullopt) {
        add_points(object_id, View<EdgetamPoint>(points.data(), points.size()), frame, box);
    }
    /// A mask at the frame's size (`stride` 0: rows `width` bytes apart); copied by the call.
    void add_mask(uint32_t object_id, const uint8_t *mask, uint32_t width, uint32_t height,
                  std::size_t stride = 0, uint64_t frame = next_frame) {
        detail::check(edgetam_tracker_add_mask(handle_.get(), object_id, frame, mask, width, height,
                                               stride ? stride : width));
    }
    Result track(const Frame &frame) {
        EdgetamResult *out = nullptr;
        detail::check(edgetam_tracker_track(handle_.get(), &frame.raw, &out));
        return Result(out);
    }
    Result refresh() {
        EdgetamResult *out = nullptr;
        detail::check(edgetam_tracker_refresh(handle_.get(), &out));
        return Result(out);
    }
    /// Throws Error (EDGETAM_STATUS_UNKNOWN_OBJECT) when there is no such object.
    void remove_object(uint32_t object_id) {
        detail::check(edgetam_tracker_remove_object(handle_.get(), object_id));
    }
    void reset() { detail::check(edgetam_tracker_reset(handle_.get())); }
    uint64_t next_frame_index() const {
        uint64_t out = 0;
        detail::check(edgetam_tracker_next_frame(handle_.get(), &out));
        return out;
    }
    EdgetamTracker *get() const noexcept { return handle_.get(); }

private:
    detail::Owned<EdgetamTracker, edgetam_tracker_free> handle_;
};

}  // namespace edgetam

#endif  // EDGETAM_HPP

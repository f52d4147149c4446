/*
 * The C API's bad-input cases: each call must return the documented status code and leave a
 * message naming the problem in edgetam_last_error(), never crash.
 *
 *   errors MODEL
 *   errors MODEL --bf16-refused   (under EDGETAM_ISA=avx2: only the bf16 refusal cases)
 *
 * Prints "ok - NAME" or "FAIL - NAME: ..." per case and "errors: N passed, M failed"; exits
 * non-zero if any failed.
 */
#include <edgetam.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

/* The call returned `want` and the message contains `text`. */
static void expect(const char *name, EdgetamStatus got, EdgetamStatus want, const char *text) {
    const char *message = edgetam_last_error();
    if (got == want && (want == EDGETAM_STATUS_OK || strstr(message, text) != NULL)) {
        printf("ok - %s\n", name);
        passed++;
    } else {
        printf("FAIL - %s: got %s \"%s\", want %s containing \"%s\"\n", name,
               edgetam_status_name(got), message, edgetam_status_name(want), text);
        failed++;
    }
}

static void expect_true(const char *name, int condition) {
    printf("%s - %s\n", condition ? "ok" : "FAIL", name);
    if (condition) passed++; else failed++;
}

/* A `format` frame of `w` x `h` with its size set: plane 0 at `data`, rows `stride` bytes
 * apart; the other planes NULL (the caller sets those its format uses). */
static EdgetamFrame frame_of(EdgetamPixelFormat format, const uint8_t *data, uint32_t w,
                             uint32_t h, size_t stride) {
    EdgetamFrame f;
    memset(&f, 0, sizeof f);
    f.size = sizeof f;
    f.format = format;
    f.width = w;
    f.height = h;
    f.planes[0].data = data;
    f.planes[0].stride = stride;
    return f;
}

/* Another thread: sees no error from the main thread, makes its own. */
static void *other_thread(void *arg) {
    char *seen = (char *)arg;
    strcpy(seen, edgetam_last_error());
    edgetam_result_count(NULL, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL\n", argv[0]);
        return 2;
    }
    EdgetamModel *model = (EdgetamModel *)1;
    EdgetamTracker *tracker = NULL;
    EdgetamResult *result = NULL;
    EdgetamModelOptions options = {0};
    options.size = sizeof options;
    expect_true("the header's version macros match the library (edgetam_version_compatible)",
                edgetam_version_compatible() &&
                    edgetam_version_number() == EDGETAM_VERSION_NUMBER &&
                    strcmp(edgetam_version(), EDGETAM_VERSION_STRING) == 0);

    if (argc > 2 && strcmp(argv[2], "--bf16-refused") == 0) {
        /* Where bf16 cannot run (scripts/test-capi.sh caps the kernels with EDGETAM_ISA):
         * refused with its own status and a message saying why, never f32 in its place. */
        options.input_size = 256;
        options.precision = "bf16";
        expect("load: bf16 where it cannot run is refused",
               edgetam_model_load(argv[1], &options, &model),
               EDGETAM_STATUS_PRECISION_UNAVAILABLE, "precision bf16 is not available here");
        expect_true("load: out set to NULL on the refusal", model == NULL);
        printf("# %s: %s\n", edgetam_status_name(EDGETAM_STATUS_PRECISION_UNAVAILABLE),
               edgetam_last_error());
        options.precision = "f32";
        expect("load: f32 still loads", edgetam_model_load(argv[1], &options, &model),
               EDGETAM_STATUS_OK, "");
        const char *precision = NULL;
        expect("model_precision", edgetam_model_precision(model, &precision), EDGETAM_STATUS_OK,
               "");
        expect_true("model_precision is f32", precision && strcmp(precision, "f32") == 0);
        edgetam_model_free(model);
        printf("errors: %d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
    }

    /* --- model loading --- */
    expect("load: NULL source", edgetam_model_load(NULL, NULL, &model), EDGETAM_STATUS_NULL_POINTER,
           "source is NULL");
    expect_true("load: out set to NULL on failure", model == NULL);
    expect("load: NULL out", edgetam_model_load(argv[1], NULL, NULL), EDGETAM_STATUS_NULL_POINTER,
           "out is NULL");
    {
        EdgetamModelOptions unset = {0};
        expect("load: options size not set", edgetam_model_load(argv[1], &unset, &model),
               EDGETAM_STATUS_INVALID_ARGUMENT,
               "options->size is 0: set it to sizeof(EdgetamModelOptions)");
    }
    expect("load: missing folder", edgetam_model_load("/nonexistent/edgetam-model", NULL, &model),
           EDGETAM_STATUS_MODEL, "/nonexistent/edgetam-model");
    options.device = "tpu";
    expect("load: unknown device", edgetam_model_load(argv[1], &options, &model),
           EDGETAM_STATUS_DEVICE, "is not a device");
    options.device = "cuda:0";
    EdgetamStatus cuda = edgetam_model_load(argv[1], &options, &model);
    if (cuda == EDGETAM_STATUS_OK) edgetam_model_free(model);
    expect_true("load: cuda:0 is a device error or loads (with the cuda feature and a GPU)",
                cuda == EDGETAM_STATUS_DEVICE || cuda == EDGETAM_STATUS_OK);
    options.device = "cpu";
    options.precision = "f16";
    expect("load: unknown precision", edgetam_model_load(argv[1], &options, &model),
           EDGETAM_STATUS_INVALID_ARGUMENT, "precision must be f32 or bf16");
    options.precision = NULL;
    options.input_size = 300;
    expect("load: input size not a multiple of 256", edgetam_model_load(argv[1], &options, &model),
           EDGETAM_STATUS_INVALID_ARGUMENT, "input size 300");
    options.input_size = 256;
    expect("load: fixture model at 256", edgetam_model_load(argv[1], &options, &model),
           EDGETAM_STATUS_OK, "");
    if (!model) return 1;
    const char *backend = NULL;
    expect("model_backend: NULL model", edgetam_model_backend(NULL, &backend),
           EDGETAM_STATUS_NULL_POINTER, "model is NULL");
    expect("model_backend: NULL out", edgetam_model_backend(model, NULL),
           EDGETAM_STATUS_NULL_POINTER, "out is NULL");
    expect("model_backend", edgetam_model_backend(model, &backend), EDGETAM_STATUS_OK, "");
    expect_true("model_backend is the CPU path", backend && strncmp(backend, "cpu", 3) == 0);
    uint32_t size = 0;
    expect("model_input_size", edgetam_model_input_size(model, &size), EDGETAM_STATUS_OK, "");
    expect_true("model_input_size is 256", size == 256);
    const char *precision = NULL;
    expect("model_precision: NULL out", edgetam_model_precision(model, NULL),
           EDGETAM_STATUS_NULL_POINTER, "out is NULL");
    expect_true("model_precision is f32",
                edgetam_model_precision(model, &precision) == EDGETAM_STATUS_OK && precision &&
                    strcmp(precision, "f32") == 0);
    {
        /* bf16: loads as bf16 where the CPU runs it, else is refused; never f32 in its place. */
        EdgetamModelOptions bf16 = options;
        bf16.precision = "bf16";
        EdgetamModel *fast = NULL;
        EdgetamStatus s = edgetam_model_load(argv[1], &bf16, &fast);
        const char *got = NULL;
        if (s == EDGETAM_STATUS_OK) {
            edgetam_model_precision(fast, &got);
            edgetam_model_free(fast);
        }
        expect_true("load: bf16 loads as bf16 or is refused",
                    (s == EDGETAM_STATUS_OK && got && strcmp(got, "bf16") == 0) ||
                        (s == EDGETAM_STATUS_PRECISION_UNAVAILABLE && fast == NULL));
    }

    /* --- trackers and frames --- */
    tracker = (EdgetamTracker *)1;
    expect("tracker_new: NULL model", edgetam_tracker_new(NULL, &tracker),
           EDGETAM_STATUS_NULL_POINTER, "model is NULL");
    expect_true("tracker_new: out set to NULL on failure", tracker == NULL);
    expect("tracker_new: NULL out", edgetam_tracker_new(model, NULL), EDGETAM_STATUS_NULL_POINTER,
           "out is NULL");
    expect("tracker_new", edgetam_tracker_new(model, &tracker), EDGETAM_STATUS_OK, "");

    enum { W = 64, H = 48 };
    static uint8_t pixels[W * H * 4];
    for (size_t i = 0; i < sizeof pixels; i++) pixels[i] = (uint8_t)((i * 37) ^ (i >> 5));
    EdgetamFrame frame = frame_of(EDGETAM_PIXEL_FORMAT_RGB8, pixels, W, H, 3 * (size_t)W);

    expect("track: NULL tracker", edgetam_tracker_track(NULL, &frame, &result),
           EDGETAM_STATUS_NULL_POINTER, "tracker is NULL");
    expect("track: NULL frame", edgetam_tracker_track(tracker, NULL, &result),
           EDGETAM_STATUS_NULL_POINTER, "frame is NULL");
    expect("track: NULL out", edgetam_tracker_track(tracker, &frame, NULL),
           EDGETAM_STATUS_NULL_POINTER, "out is NULL");
    EdgetamFrame bad = frame;
    bad.format = 99;
    expect("track: unknown pixel format", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_ARGUMENT, "unknown pixel format 99");
    bad = frame;
    bad.size = 0;
    expect("track: frame size not set", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_ARGUMENT, "frame->size is 0: set it to sizeof(EdgetamFrame)");
    {
        /* A program built against a newer edgetam.h whose EdgetamFrame has one more field:
         * accepted while the field is zero, refused once it is set (on a tracker of its own,
         * since a tracked frame moves the frame index the cases below prompt on). */
        struct {
            EdgetamFrame frame;
            uint64_t newer_field;
        } newer;
        memset(&newer, 0, sizeof newer);
        newer.frame = frame;
        newer.frame.size = sizeof newer;
        EdgetamTracker *other = NULL;
        expect("tracker_new (for the struct-size cases)", edgetam_tracker_new(model, &other),
               EDGETAM_STATUS_OK, "");
        expect("track: a newer header's frame, new field zero",
               edgetam_tracker_track(other, &newer.frame, &result), EDGETAM_STATUS_OK, "");
        edgetam_result_free(result);
        result = NULL;
        newer.newer_field = 7;
        expect("track: a newer header's frame, new field set",
               edgetam_tracker_track(other, &newer.frame, &result),
               EDGETAM_STATUS_INVALID_ARGUMENT, "sets fields libedgetam");
        edgetam_tracker_free(other);
    }
    bad = frame;
    bad.format = -1;
    expect("track: negative pixel format", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_ARGUMENT, "unknown pixel format -1");
    bad = frame;
    bad.planes[0].stride = 3 * W - 1;
    expect("track: stride too small", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_FRAME, "row stride of at least 192 bytes in plane 0, got 191");
    bad = frame;
    bad.planes[0].data = NULL;
    expect("track: NULL plane", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_NULL_POINTER, "frame->planes[0].data is NULL");
    bad = frame;
    bad.width = 0;
    expect("track: zero width", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_FRAME, "at least one pixel");
    bad = frame;
    bad.width = 100000;
    bad.planes[0].stride = 300000;
    expect("track: width over the limit", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_LIMIT, "above the limit");
    bad = frame;
    bad.planes[0].stride = SIZE_MAX;
    expect("track: stride overflowing", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_FRAME, "too large");
    bad = frame;
    bad.format = EDGETAM_PIXEL_FORMAT_NV12;
    bad.width = W - 1;
    bad.planes[0].stride = W;
    bad.planes[1].data = pixels + W * H;
    bad.planes[1].stride = W;
    expect("track: NV12 with an odd width", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_FRAME, "must be even");
    bad.width = W;
    bad.planes[1].data = NULL;
    expect("track: NV12 without its chroma plane", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_NULL_POINTER, "frame->planes[1].data is NULL");
    bad.planes[1].data = pixels + W * H;
    bad.planes[1].stride = W / 2;
    expect("track: NV12 chroma stride too small", edgetam_tracker_track(tracker, &bad, &result),
           EDGETAM_STATUS_INVALID_FRAME, "in plane 1");

    /* --- prompts --- */
    EdgetamBox box = {10, 8, 40, 30};
    expect("add_box: NULL tracker", edgetam_tracker_add_box(NULL, 1, EDGETAM_NEXT_FRAME, box),
           EDGETAM_STATUS_NULL_POINTER, "tracker is NULL");
    expect("add_box: a frame that is neither current nor next",
           edgetam_tracker_add_box(tracker, 1, 5, box), EDGETAM_STATUS_INVALID_PROMPT,
           "cannot be applied");
    EdgetamPoint points[65];
    for (int i = 0; i < 65; i++) {
        points[i].x = 20;
        points[i].y = 20;
        points[i].label = 1;
    }
    expect("add_points: 65 points", edgetam_tracker_add_points(tracker, 1, 0, NULL, points, 65),
           EDGETAM_STATUS_LIMIT, "above the limit of 64");
    expect("add_points: NULL points", edgetam_tracker_add_points(tracker, 1, 0, NULL, NULL, 1),
           EDGETAM_STATUS_NULL_POINTER, "points is NULL");
    expect("add_points: neither box nor points",
           edgetam_tracker_add_points(tracker, 1, 0, NULL, NULL, 0), EDGETAM_STATUS_INVALID_PROMPT,
           "needs a box, points or a mask");
    points[1].label = 7;
    expect("add_points: bad label", edgetam_tracker_add_points(tracker, 1, 0, NULL, points, 2),
           EDGETAM_STATUS_INVALID_ARGUMENT, "points[1].label is 7");
    static uint8_t mask[W * H];
    expect("add_mask: NULL mask", edgetam_tracker_add_mask(tracker, 2, 0, NULL, W, H, W),
           EDGETAM_STATUS_NULL_POINTER, "mask is NULL");
    expect("add_mask: stride too small", edgetam_tracker_add_mask(tracker, 2, 0, mask, W, H, W - 1),
           EDGETAM_STATUS_INVALID_ARGUMENT, "row stride of at least 64");
    expect("add_mask: over the limit",
           edgetam_tracker_add_mask(tracker, 2, 0, mask, 20000, 1, 20000), EDGETAM_STATUS_LIMIT,
           "mask width is 20000");
    expect("refresh: nothing tracked yet", edgetam_tracker_refresh(tracker, &result),
           EDGETAM_STATUS_INVALID_PROMPT, "nothing to refresh");
    expect("remove: unknown object", edgetam_tracker_remove_object(tracker, 5),
           EDGETAM_STATUS_UNKNOWN_OBJECT, "no object 5");

    /* --- a tracked frame, then prompts checked against its size --- */
    expect("add_box on the next frame", edgetam_tracker_add_box(tracker, 1, EDGETAM_NEXT_FRAME, box),
           EDGETAM_STATUS_OK, "");
    expect("track: RGB8", edgetam_tracker_track(tracker, &frame, &result), EDGETAM_STATUS_OK, "");
    EdgetamBox outside = {10, 8, 400, 30};
    expect("add_box: outside the frame", edgetam_tracker_add_box(tracker, 1, 0, outside),
           EDGETAM_STATUS_INVALID_PROMPT, "outside the 64x48 image");
    expect("add_mask: not the frame's size",
           edgetam_tracker_add_mask(tracker, 2, 0, mask, W / 2, H, W / 2),
           EDGETAM_STATUS_INVALID_PROMPT, "mask prompt is 32x48 but the frame is 64x48");

    /* --- results --- */
    size_t count = 0;
    EdgetamObject object;
    memset(&object, 0, sizeof object);
    object.size = sizeof object;
    expect("result_count: NULL result", edgetam_result_count(NULL, &count),
           EDGETAM_STATUS_NULL_POINTER, "result is NULL");
    expect("result_count", edgetam_result_count(result, &count), EDGETAM_STATUS_OK, "");
    expect_true("result has one object", count == 1);
    expect("result_object: past the end", edgetam_result_object(result, 1, &object),
           EDGETAM_STATUS_INVALID_ARGUMENT, "object index 1 is past the end");
    expect("result_find: unknown object", edgetam_result_find(result, 9, &object),
           EDGETAM_STATUS_UNKNOWN_OBJECT, "no object 9");
    expect("result_find", edgetam_result_find(result, 1, &object), EDGETAM_STATUS_OK, "");
    {
        EdgetamObject unset;
        memset(&unset, 0, sizeof unset);
        expect("result_find: object size not set", edgetam_result_find(result, 1, &unset),
               EDGETAM_STATUS_INVALID_ARGUMENT, "out->size is 0: set it to sizeof(EdgetamObject)");
        /* A newer header's larger EdgetamObject: the fields this library knows are written,
         * the rest left as they are, and size says how many bytes were written. */
        struct {
            EdgetamObject object;
            uint32_t newer_field;
        } newer;
        memset(&newer, 0, sizeof newer);
        newer.object.size = sizeof newer;
        newer.newer_field = 0xabcdef;
        expect("result_find: a newer header's object",
               edgetam_result_find(result, 1, &newer.object), EDGETAM_STATUS_OK, "");
        expect_true("result_find: a newer header's object gets this library's fields, size set "
                    "to the bytes written, the rest untouched",
                    newer.object.size == sizeof(EdgetamObject) && newer.object.id == 1 &&
                        newer.object.mask == object.mask && newer.newer_field == 0xabcdef);
    }
    expect_true("result object is 64x48 with a mask",
                object.mask_width == W && object.mask_height == H && object.mask != NULL);
    static uint8_t copy[W * H];
    expect("copy_mask: buffer too small", edgetam_result_copy_mask(result, 1, copy, W * H - 1, W),
           EDGETAM_STATUS_BUFFER_TOO_SMALL, "needs 3072 bytes, the buffer has 3071");
    expect("copy_mask: stride too small", edgetam_result_copy_mask(result, 1, copy, W * H, W - 1),
           EDGETAM_STATUS_INVALID_ARGUMENT, "row stride of at least 64");
    expect("copy_mask: NULL buffer", edgetam_result_copy_mask(result, 1, NULL, W * H, W),
           EDGETAM_STATUS_NULL_POINTER, "dst is NULL");
    expect("copy_mask", edgetam_result_copy_mask(result, 1, copy, W * H, W), EDGETAM_STATUS_OK, "");
    expect_true("copied mask equals the result's", memcmp(copy, object.mask, W * H) == 0);
    edgetam_result_free(result);
    result = NULL;

    /* --- the other pixel formats are accepted (planes of their own, padded strides) --- */
    static uint8_t y_plane[(W + 8) * H], uv_plane[(W + 8) * H / 2], u_plane[(W / 2 + 4) * H / 2],
        v_plane[(W / 2 + 4) * H / 2];
    memset(y_plane, 120, sizeof y_plane);
    memset(uv_plane, 128, sizeof uv_plane);
    memset(u_plane, 100, sizeof u_plane);
    memset(v_plane, 150, sizeof v_plane);
    EdgetamFrame nv12 = frame_of(EDGETAM_PIXEL_FORMAT_NV12, y_plane, W, H, W + 8);
    nv12.planes[1].data = uv_plane;
    nv12.planes[1].stride = W + 8;
    expect("track: NV12", edgetam_tracker_track(tracker, &nv12, &result), EDGETAM_STATUS_OK, "");
    edgetam_result_free(result);
    EdgetamFrame i420 = nv12;
    i420.format = EDGETAM_PIXEL_FORMAT_I420;
    i420.planes[1].data = u_plane;
    i420.planes[1].stride = W / 2 + 4;
    i420.planes[2].data = v_plane;
    i420.planes[2].stride = W / 2 + 4;
    expect("track: I420", edgetam_tracker_track(tracker, &i420, &result), EDGETAM_STATUS_OK, "");
    edgetam_result_free(result);
    EdgetamFrame gray = frame;
    gray.format = EDGETAM_PIXEL_FORMAT_GRAY8;
    gray.planes[0].stride = W;
    expect("track: GRAY8", edgetam_tracker_track(tracker, &gray, &result), EDGETAM_STATUS_OK, "");
    edgetam_result_free(result);
    result = NULL;
    uint64_t next = 0;
    expect("next_frame: NULL out", edgetam_tracker_next_frame(tracker, NULL),
           EDGETAM_STATUS_NULL_POINTER, "out is NULL");
    expect("next_frame", edgetam_tracker_next_frame(tracker, &next), EDGETAM_STATUS_OK, "");
    expect_true("next_frame is 4 after four tracked frames", next == 4);
    expect("remove a tracked object", edgetam_tracker_remove_object(tracker, 1), EDGETAM_STATUS_OK, "");
    expect("reset", edgetam_tracker_reset(tracker), EDGETAM_STATUS_OK, "");
    expect("next_frame after reset", edgetam_tracker_next_frame(tracker, &next), EDGETAM_STATUS_OK, "");
    expect_true("next_frame is 0 after a reset", next == 0);

    /* --- errors are per thread --- */
    edgetam_tracker_remove_object(tracker, 77);
    char seen[256] = "unset";
    pthread_t thread;
    pthread_create(&thread, NULL, other_thread, seen);
    pthread_join(thread, NULL);
    expect_true("another thread starts with no error", strcmp(seen, "") == 0);
    expect_true("another thread's error leaves this thread's message",
                strcmp(edgetam_last_error(), "no object 77") == 0);
    expect_true("status names", strcmp(edgetam_status_name(EDGETAM_STATUS_LIMIT), "EDGETAM_STATUS_LIMIT") == 0 &&
                                    strcmp(edgetam_status_name(999), "EDGETAM_STATUS_UNKNOWN") == 0);
    expect_true("version is set", strlen(edgetam_version()) > 0 && strlen(edgetam_backend()) > 0);

    /* Freeing NULL is a no-op; freeing the model before its tracker is allowed. */
    edgetam_result_free(NULL);
    edgetam_tracker_free(NULL);
    edgetam_model_free(NULL);
    edgetam_model_free(model);
    expect("the tracker outlives its model handle", edgetam_tracker_add_box(tracker, 3, 0, box),
           EDGETAM_STATUS_OK, "");
    edgetam_tracker_free(tracker);

    printf("errors: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

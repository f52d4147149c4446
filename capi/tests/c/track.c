/*
 * Replays a test case (capi/examples/reference.rs) through the C API and writes every result
 * in the reference's format, for a byte-for-byte comparison with the Rust library's.
 *
 *   track MODEL CASE_DIR OUT_PREFIX INPUT_SIZE [MAX_OUTPUTS]
 *
 * Frames go in as RGB8 with padded rows (stride = 3 * width + 13); masks come out through
 * edgetam_result_copy_mask into a padded buffer of the caller's. Writes OUT_PREFIX.txt and
 * OUT_PREFIX.masks; exits non-zero on any failed call.
 */
#include <edgetam.h>

#include "../common/case.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        EdgetamStatus s_ = (call);                                                            \
        if (s_ != EDGETAM_STATUS_OK) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,          \
                    edgetam_status_name(s_), edgetam_last_error());                           \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL CASE_DIR OUT_PREFIX INPUT_SIZE [MAX_OUTPUTS]\n", argv[0]);
        return 2;
    }
    size_t max_outputs = argc > 5 ? (size_t)strtoul(argv[5], NULL, 10) : (size_t)-1;
    struct case_data c;
    if (case_load(argv[2], &c) != 0) return 1;
    int code = 1;
    EdgetamModel *model = NULL;
    EdgetamTracker *tracker = NULL;
    EdgetamResult *result = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s.txt", argv[3]);
    FILE *text = fopen(path, "w");
    snprintf(path, sizeof path, "%s.masks", argv[3]);
    FILE *masks = fopen(path, "wb");
    const size_t stride = 3 * (size_t)c.width + 13;
    const size_t mask_stride = (size_t)c.width + 5;
    uint8_t *padded = (uint8_t *)calloc(stride * c.height, 1);
    uint8_t *mask = (uint8_t *)malloc(mask_stride * c.height);
    if (!text || !masks || !padded || !mask) goto fail;

    EdgetamModelOptions options = {0};
    options.size = sizeof options;
    options.device = "cpu";
    options.precision = "f32";
    options.input_size = (uint32_t)strtoul(argv[4], NULL, 10);
    CHECK(edgetam_model_load(argv[1], &options, &model));
    const char *backend = NULL;
    CHECK(edgetam_model_backend(model, &backend));
    printf("edgetam %s, backend %s (library: %s)\n", edgetam_version(), backend, edgetam_backend());
    CHECK(edgetam_tracker_new(model, &tracker));
    /* The tracker keeps the model alive: release our handle now. */
    edgetam_model_free(model);
    model = NULL;

    size_t outputs = 0;
    for (size_t i = 0; i < c.num_steps && outputs < max_outputs; i++) {
        const struct case_step *s = &c.steps[i];
        switch (s->kind) {
        case STEP_BOX: {
            EdgetamBox b = {s->box[0], s->box[1], s->box[2], s->box[3]};
            CHECK(edgetam_tracker_add_box(tracker, s->obj, s->frame, b));
            continue;
        }
        case STEP_POINTS: {
            EdgetamPoint pts[CASE_MAX_POINTS];
            for (size_t k = 0; k < s->num_points; k++) {
                pts[k].x = s->px[k];
                pts[k].y = s->py[k];
                pts[k].label = s->label[k];
            }
            CHECK(edgetam_tracker_add_points(tracker, s->obj, s->frame, NULL, pts, s->num_points));
            continue;
        }
        case STEP_MASK:
            CHECK(edgetam_tracker_add_mask(tracker, s->obj, s->frame, s->mask, c.width, c.height,
                                           c.width));
            continue;
        case STEP_REMOVE:
            CHECK(edgetam_tracker_remove_object(tracker, s->obj));
            continue;
        case STEP_RESET:
            CHECK(edgetam_tracker_reset(tracker));
            continue;
        case STEP_TRACK: {
            const uint8_t *rgb = c.frames + s->image * (size_t)c.width * c.height * 3;
            for (uint32_t y = 0; y < c.height; y++)
                memcpy(padded + y * stride, rgb + (size_t)y * c.width * 3, (size_t)c.width * 3);
            EdgetamFrame frame;
            memset(&frame, 0, sizeof frame);
            frame.size = sizeof frame;
            frame.format = EDGETAM_PIXEL_FORMAT_RGB8;
            frame.width = c.width;
            frame.height = c.height;
            frame.planes[0].data = padded;
            frame.planes[0].stride = stride;
            CHECK(edgetam_tracker_track(tracker, &frame, &result));
            break;
        }
        case STEP_REFRESH:
            CHECK(edgetam_tracker_refresh(tracker, &result));
            break;
        }
        uint64_t index = 0;
        uint32_t w = 0, h = 0;
        size_t n = 0;
        CHECK(edgetam_result_frame(result, &index, &w, &h));
        CHECK(edgetam_result_count(result, &n));
        case_write_frame(text, outputs, index, w, h, n);
        for (size_t k = 0; k < n; k++) {
            EdgetamObject o = {0};
            o.size = sizeof o;
            CHECK(edgetam_result_object(result, k, &o));
            CHECK(edgetam_result_copy_mask(result, o.id, mask, mask_stride * h, mask_stride));
            for (uint32_t y = 0; y < h; y++) memmove(mask + (size_t)y * w, mask + y * mask_stride, w);
            case_write_object(text, masks, &o, mask);
        }
        edgetam_result_free(result);
        result = NULL;
        outputs++;
    }
    printf("c: %zu outputs written\n", outputs);
    code = 0;
fail:
    edgetam_result_free(result);
    edgetam_tracker_free(tracker);
    edgetam_model_free(model);
    if (text) fclose(text);
    if (masks) fclose(masks);
    free(padded);
    free(mask);
    case_free(&c);
    return code;
}

// Replays a test case (capi/examples/reference.rs) through the C++ wrapper (edgetam.hpp) and
// writes every result in the reference's format, for a byte-for-byte comparison.
//
//   track_cpp MODEL CASE_DIR OUT_PREFIX INPUT_SIZE [MAX_OUTPUTS]
//
// Frames go in as BGRA8 with padded rows (the library converts to RGB exactly, so results
// must equal the RGB reference's); masks are read through the views the Result owns. Also
// checks the wrapper's exceptions and moves.
#include <edgetam.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "../common/case.h"
#include "support.hpp"

namespace {

int run(int argc, char **argv) {
    if (argc < 5) {
        std::cerr << "usage: " << argv[0] << " MODEL CASE_DIR OUT_PREFIX INPUT_SIZE [MAX_OUTPUTS]\n";
        return 2;
    }
    std::size_t max_outputs = argc > 5 ? std::strtoul(argv[5], nullptr, 10) : SIZE_MAX;
    case_data c;
    if (case_load(argv[2], &c) != 0) return 1;
    std::unique_ptr<case_data, void (*)(case_data *)> owned(&c, case_free);
    std::unique_ptr<FILE, int (*)(FILE *)> text(std::fopen((std::string(argv[3]) + ".txt").c_str(), "w"),
                                                std::fclose);
    std::unique_ptr<FILE, int (*)(FILE *)> masks(
        std::fopen((std::string(argv[3]) + ".masks").c_str(), "wb"), std::fclose);
    if (!text || !masks) return 1;

    edgetam::ModelOptions options;
    options.input_size = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
    edgetam::Model loaded = edgetam::Model::load(argv[1], options);
    edgetam::Model model = std::move(loaded);  // moves keep one owner
    std::cout << "edgetam " << edgetam::version() << ", backend " << model.backend() << ", input "
              << model.input_size() << ", precision " << model.precision() << "\n";
    if (model.precision() != "f32") return 1;
    edgetam::Tracker tracker(model);

    const std::size_t stride = 4 * static_cast<std::size_t>(c.width) + 24;
    std::vector<uint8_t> bgra(stride * c.height, 0);
    std::size_t outputs = 0;
    for (std::size_t i = 0; i < c.num_steps && outputs < max_outputs; i++) {
        const case_step &s = c.steps[i];
        if (add_prompt_step(tracker, c, s)) continue;
        std::optional<edgetam::Result> result;
        switch (s.kind) {
        case STEP_REMOVE:
            tracker.remove_object(s.obj);
            continue;
        case STEP_RESET:
            tracker.reset();
            continue;
        case STEP_TRACK: {
            const uint8_t *rgb = c.frames + s.image * static_cast<std::size_t>(c.width) * c.height * 3;
            for (uint32_t y = 0; y < c.height; y++)
                for (uint32_t x = 0; x < c.width; x++) {
                    const uint8_t *p = rgb + (static_cast<std::size_t>(y) * c.width + x) * 3;
                    uint8_t *q = bgra.data() + y * stride + 4 * static_cast<std::size_t>(x);
                    q[0] = p[2];
                    q[1] = p[1];
                    q[2] = p[0];
                    q[3] = 0x5a;  // ignored
                }
            result.emplace(tracker.track(edgetam::Frame::packed(edgetam::PixelFormat::Bgra8, c.width,
                                                                c.height, bgra.data(), stride)));
            break;
        }
        case STEP_REFRESH:
            result.emplace(tracker.refresh());
            break;
        default:  // the prompts, applied above
            continue;
        }
        auto [w, h] = result->size();
        std::vector<edgetam::Object> objects = result->objects();
        case_write_frame(text.get(), outputs, result->frame_index(), w, h, objects.size());
        for (const edgetam::Object &o : objects) {
            EdgetamObject raw{};
            raw.id = o.id;
            raw.score = o.score;
            raw.visible = o.visible;
            raw.has_box = o.box.has_value();
            if (o.box) {
                for (int k = 0; k < 4; k++) raw.bbox[k] = (*o.box)[k];
            }
            raw.area = o.area;
            raw.iou = o.iou;
            raw.prompted = o.prompted;
            raw.mask_width = o.width;
            raw.mask_height = o.height;
            case_write_object(text.get(), masks.get(), &raw, o.mask.data);
        }
        outputs++;
    }
    // The wrapper's errors: an exception with the code and the message.
    try {
        tracker.remove_object(424242);
        std::cerr << "remove_object(424242) did not throw\n";
        return 1;
    } catch (const edgetam::Error &e) {
        if (e.status() != EDGETAM_STATUS_UNKNOWN_OBJECT || std::string(e.what()) != "no object 424242") {
            std::cerr << "unexpected error " << e.status_name() << ": " << e.what() << "\n";
            return 1;
        }
    }
    std::cout << "c++: " << outputs << " outputs written\n";
    return 0;
}

}  // namespace

int main(int argc, char **argv) { return run_reporting_errors(run, argc, argv); }

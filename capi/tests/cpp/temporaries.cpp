// The loops C++ users write on a temporary Result, on real frames (run under AddressSanitizer
// by scripts/test-capi.sh): each Object's mask must outlive the Result it came from.
//
//   temporaries MODEL CASE_DIR INPUT_SIZE
//
// Applies the case's prompts up to its first tracked frame, then tracks three frames with
//   for (auto &o : tracker.track(frame).objects()) use(o.mask);
//   auto o = tracker.track(frame).at(0);            use(o.mask);
//   auto f = tracker.track(frame).find(id);         use(f->mask);
// and checks every mask read that way against the object's area (the mask's count of ones). With
// views into a freed Result (the wrapper before masks were shared), ASan reports a
// heap-use-after-free on the first loop. Also checks at compile time that a View cannot be made
// from a temporary vector or array (it would dangle at the end of the statement).
#include <edgetam.hpp>

#include <iostream>
#include <memory>
#include <type_traits>
#include <vector>

#include "../common/case.h"
#include "support.hpp"

static_assert(!std::is_constructible_v<edgetam::View<uint8_t>, std::vector<uint8_t> &&>,
              "a View from a temporary vector would dangle");
static_assert(!std::is_constructible_v<edgetam::View<uint8_t>, std::array<uint8_t, 4> &&>,
              "a View from a temporary array would dangle");
static_assert(std::is_constructible_v<edgetam::View<uint8_t>, const std::vector<uint8_t> &>);

namespace {

std::size_t checked = 0;
std::size_t failures = 0;

// Reads every byte of the mask (what ASan watches) and compares its ones with the area.
void use(const char *how, const edgetam::Object &o) {
    uint64_t ones = 0;
    for (uint8_t v : o.mask) ones += v != 0;
    if (o.mask.size != static_cast<std::size_t>(o.width) * o.height || ones != o.area) {
        std::cerr << how << ": object " << o.id << " mask has " << ones << " ones in "
                  << o.mask.size << " bytes, area " << o.area << "\n";
        failures++;
    }
    checked++;
}

int run(int argc, char **argv) {
    if (argc < 4) {
        std::cerr << "usage: " << argv[0] << " MODEL CASE_DIR INPUT_SIZE\n";
        return 2;
    }
    (void)case_write_frame;  // case.h's writers are for the replay programs
    (void)case_write_object;
    case_data c;
    if (case_load(argv[2], &c) != 0) return 1;
    std::unique_ptr<case_data, void (*)(case_data *)> owned(&c, case_free);
    edgetam::ModelOptions options;
    options.input_size = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));
    edgetam::Model model = edgetam::Model::load(argv[1], options);
    edgetam::Tracker tracker(model);

    std::size_t first_track = c.num_steps;
    for (std::size_t i = 0; i < c.num_steps && first_track == c.num_steps; i++) {
        const case_step &s = c.steps[i];
        if (s.kind == STEP_TRACK)
            first_track = i;
        else
            add_prompt_step(tracker, c, s);  // other steps before the first tracked frame: none
    }
    if (first_track == c.num_steps || c.num_frames < 3) {
        std::cerr << "the case has no tracked frame or fewer than 3 frames\n";
        return 1;
    }
    const std::size_t frame_bytes = static_cast<std::size_t>(c.width) * c.height * 3;
    auto frame = [&](std::size_t k) {
        return edgetam::Frame::packed(edgetam::PixelFormat::Rgb8, c.width, c.height,
                                      c.frames + k * frame_bytes);
    };

    // The loop everyone writes: the Result is a temporary, destroyed before the body runs.
    uint32_t some_id = 0;
    for (auto &o : tracker.track(frame(0)).objects()) {
        use("objects() of a temporary", o);
        some_id = o.id;
    }
    // at(i) and find(id) on a temporary, the Object kept past the statement.
    auto first = tracker.track(frame(1)).at(0);
    use("at(0) of a temporary", first);
    auto found = tracker.track(frame(2)).find(some_id);
    if (!found) {
        std::cerr << "find(" << some_id << ") of a temporary found nothing\n";
        return 1;
    }
    use("find(id) of a temporary", *found);
    // Copies and moves of an Object keep the mask too, after the Result is gone.
    edgetam::Object copy = first;
    first = edgetam::Object{};
    use("a copy of at(0), the original reset", copy);

    std::cout << "temporaries: " << checked << " masks read from temporary results, " << failures
              << " wrong\n";
    return failures == 0 && checked >= 4 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) { return run_reporting_errors(run, argc, argv); }

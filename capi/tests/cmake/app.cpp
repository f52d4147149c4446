// A small C++ program against the installed package (find_package(edgetam) +
// edgetam::edgetam): loads the model, prompts a box around a disc on a synthetic frame and
// prints what it tracked (with the test fixture's random weights the mask means nothing; the
// disc is for a real model).
//
//   app MODEL
#include <edgetam.hpp>

#include <iostream>
#include <vector>

int main(int argc, char **argv) {
    if (argc < 2) {
        std::cerr << "usage: " << argv[0] << " MODEL\n";
        return 2;
    }
    try {
        edgetam::ModelOptions options;
        options.input_size = 256;
        edgetam::Model model = edgetam::Model::load(argv[1], options);
        edgetam::Tracker tracker(model);
        // A red disc (radius 24 at 100, 80) on a blue-grey gradient.
        const uint32_t w = 192, h = 160;
        std::vector<uint8_t> rgb(3 * w * h);
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++) {
                uint8_t *p = &rgb[3 * (y * w + x)];
                int dx = static_cast<int>(x) - 100, dy = static_cast<int>(y) - 80;
                bool disc = dx * dx + dy * dy <= 24 * 24;
                p[0] = disc ? 220 : static_cast<uint8_t>(60 + x / 4);
                p[1] = disc ? 40 : static_cast<uint8_t>(70 + y / 4);
                p[2] = disc ? 30 : 110;
            }
        tracker.add_box(1, EdgetamBox{74, 54, 126, 106});
        for (auto &o : tracker.track(edgetam::Frame::packed(edgetam::PixelFormat::Rgb8, w, h,
                                                             rgb.data()))
                           .objects()) {
            std::cout << "edgetam " << edgetam::version() << " on " << model.backend()
                      << ": object " << o.id << " visible " << o.visible << ", area " << o.area
                      << " of " << o.mask.size << " pixels";
            if (o.box)
                std::cout << ", box " << (*o.box)[0] << "," << (*o.box)[1] << "," << (*o.box)[2]
                          << "," << (*o.box)[3];
            std::cout << "\n";
            if (o.id != 1 || o.mask.size != static_cast<std::size_t>(w) * h) return 1;
        }
        return 0;
    } catch (const edgetam::Error &e) {
        std::cerr << "edgetam error " << e.status_name() << ": " << e.what() << "\n";
        return 1;
    }
}

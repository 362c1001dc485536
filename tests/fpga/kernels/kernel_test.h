// Helpers for the hetc_hls kernel unit tests (one binary per kernel header; built and run by
// tests/test_fpga_kernels.py). A test pushes one sample into the kernel's input stream(s),
// runs the kernel, and compares everything it wrote with a plain-loop reference computed in
// the test: fixed-point results must be identical, float ones within 1e-5 relative.
// main() returns the number of failed checks.
#ifndef HETC_KERNEL_TEST_H_
#define HETC_KERNEL_TEST_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "hetc_hls.h"

namespace kt {

static int failures = 0;
static int checks = 0;

// Deterministic uniform numbers (xorshift64*), so failures reproduce.
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed * 2654435761u + 1) {}
    double uniform(double lo, double hi) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        const uint64_t bits = (state * 2685821657736338717ull) >> 11;
        return lo + (hi - lo) * (double(bits) / 9007199254740992.0);
    }
};

template <class T> std::vector<T> random_vector(Rng& rng, size_t n, double lo, double hi) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (T)rng.uniform(lo, hi);
    return v;
}

template <class T> void push(hls::stream<T>& s, const std::vector<T>& v) {
    for (size_t i = 0; i < v.size(); i++) s.write(v[i]);
}

inline bool same(float got, float want) {
    return std::fabs(got - want) <= 1e-5f * std::fmax(std::fabs(want), 1.0f) || (std::isnan(got) && std::isnan(want));
}
template <class T> bool same(const T& got, const T& want) { return got == want; }

// Checks that `out` holds exactly `want` and `in` was consumed entirely.
template <class in_T, class res_T>
void expect(const char* what, hls::stream<in_T>& in, hls::stream<res_T>& out, const std::vector<res_T>& want) {
    checks++;
    int bad = 0;
    if (!in.empty()) {
        std::printf("FAIL %s: the kernel left %zu input elements unread\n", what, (size_t)in.size());
        bad++;
    }
    if (out.size() != want.size()) {
        std::printf("FAIL %s: %zu outputs, expected %zu\n", what, (size_t)out.size(), want.size());
        failures++;
        while (!out.empty()) out.read();
        return;
    }
    for (size_t i = 0; i < want.size(); i++) {
        const res_T got = out.read();
        if (!same(got, want[i]) && bad++ < 5) {
            std::printf("FAIL %s: [%zu] = %.9g, expected %.9g\n", what, i, (double)got, (double)want[i]);
        }
    }
    if (bad) failures++;
    else std::printf("ok   %s\n", what);
}

inline int report() {
    std::printf("%d of %d checks failed\n", failures, checks);
    return failures;
}

} // namespace kt

#endif

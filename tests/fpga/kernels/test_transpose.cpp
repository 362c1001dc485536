// hetc_hls::transpose against index arithmetic on the flat input: 2-D, 3-D (HWC -> CHW) and
// 4-D permutations, a type change, fixed and float.
#include "kernel_test.h"

// A transpose of a tensor of shape IN (4 axes, left-padded with 1s) by PERM.
template <unsigned I0, unsigned I1, unsigned I2, unsigned I3, unsigned P0, unsigned P1, unsigned P2, unsigned P3>
struct tr_cfg {
    static const unsigned n_elem = I0 * I1 * I2 * I3;
    static constexpr unsigned in_dim(unsigned a) { return a == 0 ? I0 : a == 1 ? I1 : a == 2 ? I2 : I3; }
    static constexpr unsigned in_stride(unsigned a) { return a == 3 ? 1 : in_dim(a + 1) * in_stride(a + 1); }
    static const unsigned out_d0 = in_dim(P0), out_d1 = in_dim(P1), out_d2 = in_dim(P2), out_d3 = in_dim(P3);
    static const unsigned in_s0 = in_stride(P0), in_s1 = in_stride(P1), in_s2 = in_stride(P2), in_s3 = in_stride(P3);
    static const unsigned perm[4];
    static const unsigned dims[4];
};
template <unsigned I0, unsigned I1, unsigned I2, unsigned I3, unsigned P0, unsigned P1, unsigned P2, unsigned P3>
const unsigned tr_cfg<I0, I1, I2, I3, P0, P1, P2, P3>::perm[4] = {P0, P1, P2, P3};
template <unsigned I0, unsigned I1, unsigned I2, unsigned I3, unsigned P0, unsigned P1, unsigned P2, unsigned P3>
const unsigned tr_cfg<I0, I1, I2, I3, P0, P1, P2, P3>::dims[4] = {I0, I1, I2, I3};

template <class data_T, class res_T, class C> void check(const char* what, uint64_t seed) {
    kt::Rng rng(seed);
    std::vector<data_T> x = kt::random_vector<data_T>(rng, C::n_elem, -8, 8);
    std::vector<res_T> want(C::n_elem);
    unsigned idx[4];
    for (idx[0] = 0; idx[0] < C::dims[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < C::dims[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < C::dims[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < C::dims[3]; idx[3]++) {
                    const unsigned src = ((idx[0] * C::dims[1] + idx[1]) * C::dims[2] + idx[2]) * C::dims[3] + idx[3];
                    // output position: output axis k walks input axis perm[k]
                    unsigned dst = 0;
                    for (unsigned k = 0; k < 4; k++) dst = dst * C::dims[C::perm[k]] + idx[C::perm[k]];
                    want[dst] = (res_T)x[src];
                }
    hls::stream<data_T> in;
    hls::stream<res_T> out;
    kt::push(in, x);
    hetc_hls::transpose<data_T, res_T, C>(in, out);
    kt::expect(what, in, out, want);
}

int main() {
    typedef ap_fixed<16, 6> fx;
    check<fx, fx, tr_cfg<1, 1, 3, 5, 0, 1, 3, 2> >("transpose 2-D (3,5)", 1);
    check<fx, fx, tr_cfg<1, 4, 3, 2, 0, 3, 1, 2> >("transpose HWC -> CHW (4,3,2)", 2);
    check<float, float, tr_cfg<2, 3, 4, 5, 2, 0, 3, 1> >("transpose 4-D (2,3,4,5) by (2,0,3,1)", 3);
    check<fx, ap_fixed<8, 3, AP_RND, AP_SAT>, tr_cfg<1, 2, 3, 4, 0, 2, 1, 3> >("transpose with a type change", 4);
    return kt::report();
}

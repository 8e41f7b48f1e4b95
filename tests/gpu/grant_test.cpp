// SPDX-License-Identifier: Apache-2.0
// The CUDA grant checks of the unit suite, run again in the GPU suite on a GPU host (the unit
// suite runs where CI runs, without a GPU, and takes the no_device branch there).
#include "../unit/cuda_grant_test.cpp"

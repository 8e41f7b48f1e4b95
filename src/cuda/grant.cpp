// Same-host device-memory grants (include/sluice/cuda/grant.hpp): CUDA IPC export and open,
// and the server's copies from registered page cache into opened client allocations.

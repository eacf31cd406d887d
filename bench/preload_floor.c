/* bench/preload_floor.c — a library with nothing in it: what preloading any library
 * costs a process's start-up (uslab bench startup reports it beside the allocators). */
int uslab_bench_preload_floor;

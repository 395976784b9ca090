/* ktprobe xdp-cycle (xdp_cycle.c). */
#ifndef KTPROBE_XDP_CYCLE_H
#define KTPROBE_XDP_CYCLE_H
int xdp_cycle(int argc, char **argv);
#endif

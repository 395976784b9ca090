/* ktprobe bpf-stress (bpf_stress.c). */
#ifndef KTPROBE_BPF_STRESS_H
#define KTPROBE_BPF_STRESS_H
int bpf_stress(int argc, char **argv);
#endif

/* ktprobe module-cycle: load and unload a module N times with the raw
 * syscalls and time each unload (delete_module runs the module notifier, where
 * ktguard holds the module's text). For the guard benchmark. */
#ifndef KTPROBE_MODULE_CYCLE_H
#define KTPROBE_MODULE_CYCLE_H
int module_cycle(int argc, char **argv);
#endif

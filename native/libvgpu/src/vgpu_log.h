/* Logging to stderr in one write per line, levels as HAMi-core's LIBCUDA_LOG_LEVEL. */
#ifndef VGPU_LOG_H
#define VGPU_LOG_H

enum vgpu_log_level {
    VGPU_LOG_ERROR = 0,
    VGPU_LOG_WARN = 1,
    VGPU_LOG_MSG = 2,
    VGPU_LOG_INFO = 3,
    VGPU_LOG_DEBUG = 4
};

void vgpu_log_set_level(int level);
void vgpu_log(enum vgpu_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define vgpu_error(...) vgpu_log(VGPU_LOG_ERROR, __VA_ARGS__)
#define vgpu_warn(...) vgpu_log(VGPU_LOG_WARN, __VA_ARGS__)
#define vgpu_info(...) vgpu_log(VGPU_LOG_INFO, __VA_ARGS__)
#define vgpu_debug(...) vgpu_log(VGPU_LOG_DEBUG, __VA_ARGS__)

#endif

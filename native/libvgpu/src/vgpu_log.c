#include "vgpu_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static int vgpu_log_level = VGPU_LOG_MSG;

static const char *const vgpu_level_names[] = {"ERROR", "WARN", "MSG", "INFO", "DEBUG"};

void vgpu_log_set_level(int level)
{
    __atomic_store_n(&vgpu_log_level, level, __ATOMIC_RELAXED);
}

void vgpu_log(enum vgpu_log_level level, const char *fmt, ...)
{
    if ((int)level > __atomic_load_n(&vgpu_log_level, __ATOMIC_RELAXED) && level != VGPU_LOG_ERROR)
        return;
    char line[1024];
    int used = snprintf(line, sizeof line, "[libvgpu %s pid=%d] ", vgpu_level_names[level],
                        (int)getpid());
    va_list args;
    va_start(args, fmt);
    int more = vsnprintf(line + used, sizeof line - (size_t)used - 1, fmt, args);
    va_end(args);
    size_t len = (size_t)used + (more < 0 ? 0 : (size_t)more);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    /* One write(2) per line keeps lines from different processes whole; nothing to do if
     * stderr is gone. */
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

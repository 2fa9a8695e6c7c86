/* Container limits from the device plugin's /usr/local/vgpu/limits.env, which wins, and from
 * HAMi's environment variables (and a limits.env beside a region they name), which can only make
 * them stricter (README.md: "Limits file"). */
#ifndef VGPU_CONFIG_H
#define VGPU_CONFIG_H

#include <stdint.h>

#define VGPU_MAX_DEVICES 16
#define VGPU_DEFAULT_CACHE "/tmp/cudevshr.cache"
#define VGPU_DEFAULT_DIR "/usr/local/vgpu"
#define VGPU_LIMITS_FILE "limits.env"

enum vgpu_policy { VGPU_POLICY_DEFAULT, VGPU_POLICY_FORCE, VGPU_POLICY_DISABLE };

struct vgpu_config {
    int broken;                               /* a limit was malformed: refuse allocations */
    char problem[512];                        /* what was malformed, for the refusal message */
    char cache_path[4096];
    uint64_t memory_limit[VGPU_MAX_DEVICES];  /* bytes, 0 = no limit */
    uint64_t sm_limit[VGPU_MAX_DEVICES];      /* percent 1..100, 100 = no limit */
    int priority;
    enum vgpu_policy policy;
    int oversubscribe;
    int log_level;
};

/* Read the configuration of this process. Never fails: problems are recorded in `broken`
 * and `problem` (limits) or logged and replaced by the safe default (the other keys). */
void vgpu_config_load(struct vgpu_config *config);

/* Parsers shared with nothing else but exposed for clarity of the contract: each returns 0 and
 * stores the value, or -1 for malformed text. */
int vgpu_parse_bytes(const char *text, uint64_t *bytes);
int vgpu_parse_percent(const char *text, uint64_t *percent);

#endif

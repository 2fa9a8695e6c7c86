#include "vgpu_config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vgpu_log.h"

#define VGPU_FILE_MAX_ENTRIES 64
#define VGPU_FILE_MAX_LINE 4096

struct vgpu_file_entries {
    int present; /* the file exists */
    int count;
    char key[VGPU_FILE_MAX_ENTRIES][64];
    char value[VGPU_FILE_MAX_ENTRIES][VGPU_FILE_MAX_LINE];
};

/* Where a setting can come from. The device plugin's file (in the read-only folder it mounts)
 * is authoritative; a limits file beside a region chosen through the environment, and the
 * environment itself, can only make limits stricter. */
enum vgpu_source { VGPU_FROM_PLUGIN, VGPU_FROM_BESIDE, VGPU_FROM_ENV, VGPU_SOURCES };

static const char *const vgpu_source_names[VGPU_SOURCES] = {
    "the device plugin's limits file", "the limits file beside the region", "the environment"};

/* Read once, inside vgpu_init, under pthread_once. */
static struct vgpu_file_entries vgpu_files[VGPU_FROM_BESIDE + 1];

static void vgpu_config_fail(struct vgpu_config *config, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void vgpu_config_fail(struct vgpu_config *config, const char *fmt, ...)
{
    if (!config->broken) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(config->problem, sizeof config->problem, fmt, args);
        va_end(args);
    }
    config->broken = 1;
}

static int vgpu_parse_decimal(const char *text, size_t len, uint64_t *out)
{
    if (len == 0 || (len > 1 && text[0] == '0'))
        return -1;  /* empty, or a leading zero HAMi would have read as octal */
    uint64_t value = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return -1;
        unsigned digit = (unsigned)(text[i] - '0');
        if (value > (UINT64_MAX - digit) / 10)
            return -1;
        value = value * 10 + digit;
    }
    *out = value;
    return 0;
}

int vgpu_parse_bytes(const char *text, uint64_t *bytes)
{
    size_t len = strlen(text);
    unsigned shift = 0;
    if (len > 0) {
        switch (text[len - 1]) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: break;
        }
    }
    uint64_t number;
    if (vgpu_parse_decimal(text, shift ? len - 1 : len, &number) != 0)
        return -1;
    if (shift && number > (UINT64_MAX >> shift))
        return -1;
    *bytes = number << shift;
    return 0;
}

int vgpu_parse_percent(const char *text, uint64_t *percent)
{
    uint64_t number;
    if (vgpu_parse_decimal(text, strlen(text), &number) != 0 || number > 100)
        return -1;
    *percent = number;
    return 0;
}

static int vgpu_parse_int(const char *text, int *out)
{
    int negative = text[0] == '-';
    uint64_t number;
    if (vgpu_parse_decimal(text + negative, strlen(text + negative), &number) != 0 ||
        number > 2147483647u)
        return -1;
    *out = negative ? -(int)number : (int)number;
    return 0;
}

static int vgpu_read_file(const char *path, struct vgpu_file_entries *file_entries,
                          struct vgpu_config *config)
{
    struct vgpu_file_entries *entries = file_entries;
    entries->count = 0;
    entries->present = 0;
    FILE *file = fopen(path, "re");
    if (file == NULL) {
        if (errno == ENOENT)
            return 0;
        vgpu_config_fail(config, "limits file %s cannot be read: %s", path, strerror(errno));
        return -1;
    }
    entries->present = 1;
    char line[VGPU_FILE_MAX_LINE + 2];
    int number = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        number++;
        size_t len = strlen(line);
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (!feof(file)) {
            vgpu_config_fail(config, "limits file %s: line %d is over 4096 bytes", path, number);
            break;
        }
        if (len == 0 || line[0] == '#')
            continue;
        char *equals = strchr(line, '=');
        size_t key_len = equals ? (size_t)(equals - line) : 0;
        if (equals == NULL || key_len == 0 || key_len >= sizeof entries->key[0] ||
            strcspn(line, " \t") < len) {
            vgpu_config_fail(config, "limits file %s: malformed line \"%s\" (want KEY=VALUE)", path,
                             line);
            break;
        }
        if (entries->count == VGPU_FILE_MAX_ENTRIES) {
            vgpu_config_fail(config, "limits file %s: more than 64 entries", path);
            break;
        }
        memcpy(entries->key[entries->count], line, key_len);
        entries->key[entries->count][key_len] = '\0';
        strcpy(entries->value[entries->count], equals + 1);
        entries->count++;
    }
    if (ferror(file))
        vgpu_config_fail(config, "limits file %s cannot be read: %s", path, strerror(errno));
    fclose(file);
    return config->broken ? -1 : 0;
}

/* The value of `key` in one source, or NULL. An empty variable counts as unset; in a file a
 * later line wins, as it would in a shell that sources it. */
static const char *vgpu_source_value(enum vgpu_source source, const char *key)
{
    if (source == VGPU_FROM_ENV) {
        const char *value = getenv(key);
        return value != NULL && value[0] != '\0' ? value : NULL;
    }
    const struct vgpu_file_entries *entries = &vgpu_files[source];
    for (int i = entries->count - 1; i >= 0; i--)
        if (strcmp(entries->key[i], key) == 0)
            return entries->value[i];
    return NULL;
}

/* The value of a key that is not a limit, and where it came from: the device plugin's, else
 * the environment's, else the file beside the region. */
static const char *vgpu_setting_from(const char *key, enum vgpu_source *from)
{
    static const enum vgpu_source order[] = {VGPU_FROM_PLUGIN, VGPU_FROM_ENV, VGPU_FROM_BESIDE};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *value = vgpu_source_value(order[i], key);
        if (value != NULL) {
            *from = order[i];
            return value;
        }
    }
    return NULL;
}

static const char *vgpu_setting(const char *key)
{
    enum vgpu_source from = VGPU_FROM_PLUGIN;
    return vgpu_setting_from(key, &from);
}

/* The limits file beside the region the environment names, when that is not the device
 * plugin's own: "" when there is none. */
static void vgpu_beside_path(char *out, size_t size)
{
    const char *cache = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    out[0] = '\0';
    if (cache == NULL || cache[0] != '/')
        return;
    const char *slash = strrchr(cache, '/');
    int dir_len = (int)(slash - cache);
    snprintf(out, size, "%.*s/%s", dir_len, cache, VGPU_LIMITS_FILE);
    if (strcmp(out, VGPU_DEFAULT_DIR "/" VGPU_LIMITS_FILE) == 0)
        out[0] = '\0';
}

typedef int (*vgpu_parser)(const char *, uint64_t *);

/* A limit as a number where smaller is stricter: "no limit" is the largest. */
static uint64_t vgpu_strictness(uint64_t value, uint64_t unlimited)
{
    return value == 0 || value == unlimited ? UINT64_MAX : value;
}

/* One source's per-device values: `<key>_<i>` when set and non-zero, else `<key>`. 1 where
 * the source sets device i. */
static void vgpu_source_limits(struct vgpu_config *config, enum vgpu_source source,
                               const char *key, vgpu_parser parse, uint64_t out[VGPU_MAX_DEVICES],
                               int set[VGPU_MAX_DEVICES])
{
    uint64_t common = 0;
    const char *text = vgpu_source_value(source, key);
    int common_set = text != NULL;
    if (text != NULL && parse(text, &common) != 0)
        vgpu_config_fail(config, "%s=\"%s\" from %s is not a valid value", key, text,
                         vgpu_source_names[source]);
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%d", key, i);
        uint64_t value = 0;
        text = vgpu_source_value(source, name);
        if (text != NULL && parse(text, &value) != 0)
            vgpu_config_fail(config, "%s=\"%s\" from %s is not a valid value", name, text,
                             vgpu_source_names[source]);
        out[i] = value != 0 ? value : common;
        set[i] = (text != NULL && value != 0) || common_set;
    }
}

/* Per-device limits: the strictest any source sets (`unlimited` and 0 both mean no limit).
 * A value above the device plugin's is ignored, and said so. */
static void vgpu_per_device(struct vgpu_config *config, const char *key, vgpu_parser parse,
                            uint64_t unlimited, uint64_t out[VGPU_MAX_DEVICES])
{
    uint64_t values[VGPU_SOURCES][VGPU_MAX_DEVICES];
    int set[VGPU_SOURCES][VGPU_MAX_DEVICES];
    for (int source = 0; source < VGPU_SOURCES; source++)
        vgpu_source_limits(config, (enum vgpu_source)source, key, parse, values[source],
                           set[source]);
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        uint64_t strictest = UINT64_MAX;
        for (int source = 0; source < VGPU_SOURCES; source++) {
            if (!set[source][i])
                continue;
            uint64_t value = vgpu_strictness(values[source][i], unlimited);
            if (source != VGPU_FROM_PLUGIN && set[VGPU_FROM_PLUGIN][i] &&
                value > vgpu_strictness(values[VGPU_FROM_PLUGIN][i], unlimited))
                vgpu_warn("device %d: %s %llu from %s is above the device plugin's %llu; ignored",
                          i, key, (unsigned long long)values[source][i],
                          vgpu_source_names[source],
                          (unsigned long long)values[VGPU_FROM_PLUGIN][i]);
            if (value < strictest)
                strictest = value;
        }
        out[i] = strictest == UINT64_MAX ? unlimited : strictest;
    }
}

static enum vgpu_policy vgpu_parse_policy(const char *text, enum vgpu_source source)
{
    if (strcasecmp(text, "default") == 0)
        return VGPU_POLICY_DEFAULT;
    if (strcasecmp(text, "force") == 0)
        return VGPU_POLICY_FORCE;
    if (strcasecmp(text, "disable") == 0)
        return VGPU_POLICY_DISABLE;
    vgpu_error("GPU_CORE_UTILIZATION_POLICY=\"%s\" from %s is not default, force or disable; "
               "limiting as with force", text, vgpu_source_names[source]);
    return VGPU_POLICY_FORCE;
}

/* How strictly a policy limits: disable < default < force. */
static int vgpu_policy_rank(enum vgpu_policy policy)
{
    return policy == VGPU_POLICY_DISABLE ? 0 : policy == VGPU_POLICY_DEFAULT ? 1 : 2;
}

/* With the device plugin's file, its policy (default when it names none) can only be made
 * stricter; without it, the first source that names one decides, as in HAMi. */
static void vgpu_read_policy(struct vgpu_config *config)
{
    const char *key = "GPU_CORE_UTILIZATION_POLICY";
    enum vgpu_source from = VGPU_FROM_PLUGIN;
    const char *text = vgpu_files[VGPU_FROM_PLUGIN].present ? vgpu_source_value(from, key)
                                                             : vgpu_setting_from(key, &from);
    config->policy = text != NULL ? vgpu_parse_policy(text, from) : VGPU_POLICY_DEFAULT;
    if (!vgpu_files[VGPU_FROM_PLUGIN].present)
        return;
    for (int source = VGPU_FROM_BESIDE; source < VGPU_SOURCES; source++) {
        text = vgpu_source_value((enum vgpu_source)source, key);
        if (text == NULL)
            continue;
        enum vgpu_policy asked = vgpu_parse_policy(text, (enum vgpu_source)source);
        if (vgpu_policy_rank(asked) < vgpu_policy_rank(config->policy))
            vgpu_warn("%s=%s from %s is looser than the device plugin's; ignored", key, text,
                      vgpu_source_names[source]);
        else
            config->policy = asked;
    }
}

/* The task priority (a larger number is a lower priority). With the device plugin's file, its
 * priority (1 when it names none) can only be lowered; without it, the first source decides. */
static void vgpu_read_priority(struct vgpu_config *config)
{
    const char *key = "CUDA_TASK_PRIORITY";
    int plugin = vgpu_files[VGPU_FROM_PLUGIN].present;
    config->priority = 1;
    for (int source = 0; source < VGPU_SOURCES; source++) {
        enum vgpu_source from = (enum vgpu_source)source;
        const char *text = vgpu_source_value(from, key);
        int asked;
        if (text == NULL)
            continue;
        if (vgpu_parse_int(text, &asked) != 0) {
            vgpu_error("%s=\"%s\" from %s is not an integer; ignored", key, text,
                       vgpu_source_names[from]);
        } else if (from == VGPU_FROM_PLUGIN) {
            config->priority = asked;
        } else if (plugin && asked < config->priority) {
            vgpu_warn("%s=%s from %s is a higher priority than the device plugin's %d; ignored",
                      key, text, vgpu_source_names[from], config->priority);
        } else if (plugin || from == VGPU_FROM_ENV ||
                   vgpu_source_value(VGPU_FROM_ENV, key) == NULL) {
            config->priority = asked;
        }
    }
}

static void vgpu_read_scalars(struct vgpu_config *config)
{
    const char *text = vgpu_setting("LIBCUDA_LOG_LEVEL");
    config->log_level = VGPU_LOG_MSG;
    if (text != NULL && (vgpu_parse_int(text, &config->log_level) != 0 ||
                         config->log_level < 0 || config->log_level > 4)) {
        config->log_level = VGPU_LOG_MSG;
        vgpu_error("LIBCUDA_LOG_LEVEL=\"%s\" is not 0..4; using 2", text);
    }
    vgpu_log_set_level(config->log_level);

    vgpu_read_priority(config);

    text = vgpu_setting("CUDA_OVERSUBSCRIBE");
    config->oversubscribe = 0;
    if (text != NULL) {
        if (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0)
            config->oversubscribe = 1;
        else if (strcasecmp(text, "false") != 0 && strcmp(text, "0") != 0)
            vgpu_error("CUDA_OVERSUBSCRIBE=\"%s\" is not true or false; using false", text);
    }
}

void vgpu_config_load(struct vgpu_config *config)
{
    memset(config, 0, sizeof *config);
    char beside[4096 + 32];
    vgpu_read_file(VGPU_DEFAULT_DIR "/" VGPU_LIMITS_FILE, &vgpu_files[VGPU_FROM_PLUGIN], config);
    vgpu_beside_path(beside, sizeof beside);
    vgpu_files[VGPU_FROM_BESIDE].count = 0;
    if (beside[0] != '\0')
        vgpu_read_file(beside, &vgpu_files[VGPU_FROM_BESIDE], config);

    vgpu_read_scalars(config);
    /* The container's region, so that every process of it is counted together. */
    const char *cache = vgpu_setting("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    const char *asked = vgpu_source_value(VGPU_FROM_ENV, "CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (asked != NULL && cache != NULL && strcmp(asked, cache) != 0)
        vgpu_warn("CUDA_DEVICE_MEMORY_SHARED_CACHE=%s from the environment is not the device "
                  "plugin's %s; ignored", asked, cache);
    if (cache == NULL)
        cache = VGPU_DEFAULT_CACHE;
    if (cache[0] != '/' || strlen(cache) >= sizeof config->cache_path)
        vgpu_config_fail(config, "CUDA_DEVICE_MEMORY_SHARED_CACHE=\"%s\" is not an absolute path",
                         cache);
    else
        strcpy(config->cache_path, cache);

    vgpu_per_device(config, "CUDA_DEVICE_MEMORY_LIMIT", vgpu_parse_bytes, 0, config->memory_limit);
    vgpu_per_device(config, "CUDA_DEVICE_SM_LIMIT", vgpu_parse_percent, 100, config->sm_limit);
    vgpu_read_policy(config);
    if (config->broken)
        vgpu_error("configuration refused: %s; device memory allocations will fail",
                   config->problem);
}

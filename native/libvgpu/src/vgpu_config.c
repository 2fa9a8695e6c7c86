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
    int count;
    char key[VGPU_FILE_MAX_ENTRIES][64];
    char value[VGPU_FILE_MAX_ENTRIES][VGPU_FILE_MAX_LINE];
};

/* One static copy: the file is read once, inside vgpu_init, under pthread_once. */
static struct vgpu_file_entries vgpu_file;

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

static int vgpu_read_file(const char *path, struct vgpu_config *config)
{
    vgpu_file.count = 0;
    FILE *file = fopen(path, "re");
    if (file == NULL) {
        if (errno == ENOENT)
            return 0;
        vgpu_config_fail(config, "limits file %s cannot be read: %s", path, strerror(errno));
        return -1;
    }
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
        if (equals == NULL || key_len == 0 || key_len >= sizeof vgpu_file.key[0] ||
            strcspn(line, " \t") < len) {
            vgpu_config_fail(config, "limits file %s: malformed line \"%s\" (want KEY=VALUE)", path,
                             line);
            break;
        }
        if (vgpu_file.count == VGPU_FILE_MAX_ENTRIES) {
            vgpu_config_fail(config, "limits file %s: more than 64 entries", path);
            break;
        }
        memcpy(vgpu_file.key[vgpu_file.count], line, key_len);
        vgpu_file.key[vgpu_file.count][key_len] = '\0';
        strcpy(vgpu_file.value[vgpu_file.count], equals + 1);
        vgpu_file.count++;
    }
    if (ferror(file))
        vgpu_config_fail(config, "limits file %s cannot be read: %s", path, strerror(errno));
    fclose(file);
    return config->broken ? -1 : 0;
}

/* The value of `key`: the environment when present and non-empty, else the limits file. */
static const char *vgpu_setting(const char *key)
{
    const char *value = getenv(key);
    if (value != NULL && value[0] != '\0')
        return value;
    /* A later line wins, as it would in a shell that sources the file. */
    for (int i = vgpu_file.count - 1; i >= 0; i--)
        if (strcmp(vgpu_file.key[i], key) == 0)
            return vgpu_file.value[i];
    return NULL;
}

static void vgpu_limits_path(char *out, size_t size)
{
    const char *cache = getenv("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (cache == NULL || cache[0] != '/') {
        snprintf(out, size, "%s/%s", VGPU_DEFAULT_DIR, VGPU_LIMITS_FILE);
        return;
    }
    const char *slash = strrchr(cache, '/');
    int dir_len = (int)(slash - cache);
    snprintf(out, size, "%.*s/%s", dir_len, cache, VGPU_LIMITS_FILE);
}

typedef int (*vgpu_parser)(const char *, uint64_t *);

/* Per-device value: `<key>_<i>` when set and non-zero, else `<key>`, else `fallback`. */
static void vgpu_per_device(struct vgpu_config *config, const char *key, vgpu_parser parse,
                            uint64_t zero_means, uint64_t out[VGPU_MAX_DEVICES])
{
    uint64_t common = zero_means;
    const char *text = vgpu_setting(key);
    if (text != NULL) {
        if (parse(text, &common) != 0)
            vgpu_config_fail(config, "%s=\"%s\" is not a valid value", key, text);
        else if (common == 0)
            common = zero_means;
    }
    for (int i = 0; i < VGPU_MAX_DEVICES; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%d", key, i);
        uint64_t value = 0;
        text = vgpu_setting(name);
        if (text != NULL && parse(text, &value) != 0)
            vgpu_config_fail(config, "%s=\"%s\" is not a valid value", name, text);
        out[i] = value != 0 ? value : common;
    }
}

static void vgpu_read_policy(struct vgpu_config *config)
{
    const char *text = vgpu_setting("GPU_CORE_UTILIZATION_POLICY");
    config->policy = VGPU_POLICY_DEFAULT;
    if (text == NULL || strcasecmp(text, "default") == 0)
        return;
    if (strcasecmp(text, "force") == 0) {
        config->policy = VGPU_POLICY_FORCE;
    } else if (strcasecmp(text, "disable") == 0) {
        config->policy = VGPU_POLICY_DISABLE;
    } else {
        vgpu_error("GPU_CORE_UTILIZATION_POLICY=\"%s\" is not default, force or disable; "
                   "limiting as with force", text);
        config->policy = VGPU_POLICY_FORCE;
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

    text = vgpu_setting("CUDA_TASK_PRIORITY");
    config->priority = 1;
    if (text != NULL && vgpu_parse_int(text, &config->priority) != 0) {
        config->priority = 1;
        vgpu_error("CUDA_TASK_PRIORITY=\"%s\" is not an integer; using 1", text);
    }

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
    char limits_path[4096 + 32];
    vgpu_limits_path(limits_path, sizeof limits_path);
    vgpu_read_file(limits_path, config);

    vgpu_read_scalars(config);
    const char *cache = vgpu_setting("CUDA_DEVICE_MEMORY_SHARED_CACHE");
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

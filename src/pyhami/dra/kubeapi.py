"""The resource.k8s.io/v1 objects the DRA driver reads and writes."""

from pyhami.kube import Resource

RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)

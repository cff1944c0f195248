// Starts Swagger UI on /docs (a file, not an inline script: the page's CSP allows scripts from 'self' only).
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({ url: root.dataset.openapiUrl, domNode: root, deepLinking: false });
});

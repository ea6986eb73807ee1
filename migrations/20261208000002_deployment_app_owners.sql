-- Every app belongs to the project that first deployed it: deployments,
-- views and resizes of the app are checked against that project, and no
-- other project's deployment reads or joins its instances. Apps deployed
-- before go to the project of their oldest instance.
CREATE TABLE deployment_apps (
    app         text PRIMARY KEY,
    project_id  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

INSERT INTO deployment_apps (app, project_id)
SELECT DISTINCT ON (i.app) i.app, p.external_id
  FROM instances i
  JOIN consumers c ON c.id = i.consumer_id
  JOIN projects p ON p.id = c.project_id
 ORDER BY i.app, i.created_at, i.consumer_id;
